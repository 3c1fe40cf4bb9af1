"""Precision and recall of the conversation signals per kind and language, on the labelled set
tests/data/signal_followups.jsonl (aisia_plugin/signal_eval.py says what an item is and how it
is scored), over the whole set, over its held-out third (the lexicon was tuned on the other
two thirds only) and over the items no lexicon entry was tuned on
(signal_eval.UNTUNED_BATCH). Also the cost of reading one follow-up (median over the set's user
messages).

    python benchmarks/signal_precision.py [--policy PATH ...] [--data FILE] [--no-write]

Writes benchmarks/results/signal_precision.json (every count, and the items read wrong),
benchmarks/results/signal_precision.md, and the tables between the <!-- signal-precision -->
markers of docs/signals.md and README.md."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from aisia_plugin.policy import load_policy
from aisia_plugin.signal_eval import NEGATIVE, PRECISION_FLOOR, UNTUNED_BATCH, Report, evaluate, held_out, load_items
from aisia_plugin.signals import SignalReader

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
LANGUAGES = ("en", "fr", "es", "de", "it", "pt", "any")


def _cell(count) -> str:
    if not count.support:
        return ""
    p = "-" if count.precision is None else f"{count.precision:.2f}"
    r = "-" if count.recall is None else f"{count.recall:.2f}"
    return f"{p} / {r} ({count.tp + count.fn})"


def table(report: Report) -> list[str]:
    """Precision / recall (positives in the set) per kind and language; `negative` first."""
    languages = [lang for lang in LANGUAGES if any(k[1] == lang for k in report.counts)] + ["all"]
    kinds = [NEGATIVE] + [k for k in report.kinds() if k != NEGATIVE]
    lines = ["| kind | " + " | ".join(languages) + " |", "|---" * (len(languages) + 1) + "|"]
    for kind in kinds:
        cells = [_cell(report.get(kind, lang)) for lang in languages]
        label = f"**{kind}** (correction or dissatisfaction)" if kind == NEGATIVE else kind
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def negative_table(reports: dict) -> list[str]:
    """The precision floor's table: negative-signal precision / recall per language, in each view."""
    langs = ("en", "fr", "es", "de", "it", "pt", "all")
    lines = ["| correction or dissatisfaction | " + " | ".join(langs) + " |", "|---" * (len(langs) + 1) + "|"]
    views = (("all", "whole set"), ("held_out", "held-out third"), ("frozen", "never tuned on"))
    for name, title in views:
        lines.append(f"| {title} | " + " | ".join(_cell(reports[name].get(NEGATIVE, lang)) for lang in langs) + " |")
    return lines


def replace_block(path: Path, name: str, lines: list[str]) -> None:
    """Put ``lines`` between the file's <!-- name --> and <!-- /name --> markers (the prose
    around them is written by hand); a file without them is left alone."""
    text = path.read_text(encoding="utf-8")
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if start not in text or end not in text:
        print(f"{path}: no {start} block, left as is", file=sys.stderr)
        return
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(head + start + "\n" + "\n".join(lines) + "\n" + end + tail, encoding="utf-8")


def follow_up_cost_us(reader: SignalReader, items: list[dict], repeats: int = 20) -> float:
    """Median microseconds of one read_followup over the set's user messages."""
    texts = [i["text"] for i in items if i["source"] == "user"]
    times = []
    for text in texts:
        start = time.perf_counter()
        for _ in range(repeats):
            reader.read_followup(text)
        times.append((time.perf_counter() - start) / repeats * 1e6)
    return statistics.median(times)


def floor_failures(report: Report) -> list[str]:
    return [lang for lang in ("en", "fr", "es", "de", "it", "pt")
            if (report.get(NEGATIVE, lang).precision or 0.0) < PRECISION_FLOOR]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", nargs="*",
                        help="policy files layered over the shipped ones (default: the shipped policy)")
    parser.add_argument("--data", type=Path, help="labelled set (default: tests/data/signal_followups.jsonl)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    reader = SignalReader(load_policy(args.policy or None).signals)
    items = load_items(args.data)
    held = [i for i in items if held_out(i)]
    frozen = [i for i in items if i.get("batch") == UNTUNED_BATCH]
    reports = {"all": evaluate(reader, items), "held_out": evaluate(reader, held), "frozen": evaluate(reader, frozen)}
    cost = follow_up_cost_us(reader, items)
    md = ["# Conversation signals: precision and recall", "",
          "<!-- Written by benchmarks/signal_precision.py; do not edit by hand. -->", "",
          f"Labelled set: {len(items)} items ({len(held)} held out: CRC-32 of the text modulo 3 is 0; the "
          "lexicon was tuned on the others only). Each cell: precision / recall (positives in the set); "
          "'-' where nothing was predicted (precision) or nothing is positive (recall); empty where the kind is "
          "not scored for that language.", ""]
    for name, report in reports.items():
        title = {"all": "Whole set", "held_out": "Held-out third",
                 "frozen": f"Never tuned on: written after the second round of tuning, not used by the third ({len(frozen)} items, "
                           f"batch '{UNTUNED_BATCH}')"}[name]
        md += [f"## {title}", ""] + table(report) + [""]
        failing = floor_failures(report)
        md += [f"Negative-signal precision >= {PRECISION_FLOOR} in every language: "
               + ("yes" if not failing else f"no ({', '.join(failing)})"), ""]
    md += [f"Reading one follow-up (read_followup, median over the set's user messages): {cost:.1f} us.", ""]
    text = "\n".join(md)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        out = {name: {"counts": {f"{k}/{lang}": c.as_dict() for (k, lang), c in sorted(r.counts.items())},
                      "errors": r.errors, "below_floor": floor_failures(r)}
               for name, r in reports.items()}
        out["items"], out["held_out_items"], out["read_followup_median_us"] = len(items), len(held), round(cost, 2)
        (RESULTS / "signal_precision.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n",
                                                       encoding="utf-8")
        (RESULTS / "signal_precision.md").write_text(text, encoding="utf-8")
        summary = negative_table(reports)
        replace_block(REPO / "README.md", "signal-precision", summary)
        replace_block(REPO / "docs" / "signals.md", "signal-precision", summary + [""] + table(reports["all"])
                      + ["", "Held-out third:", ""] + table(reports["held_out"])
                      + ["", "Never tuned on (written after the second round of tuning, not used by the third):", ""] + table(reports["frozen"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
