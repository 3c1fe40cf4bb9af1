"""Domain-detection accuracy of the shipped policy on real prompts.

RouterArena's prompts (read in place), labelled by their dataset (routerarena_domains.yaml), with
and without the benchmark's instruction wrapper, and RouteLLM's GSM8K prompts (a math recall
check); the speed of ``detect`` (``speed``); leave one dataset out (issue 14,
``leave_one_dataset_out``); each beside the vocabulary before issue 14 (``--baseline``: the
policies/domains.yaml of a git revision). The data, labels and method: docs/domain-accuracy.md.

``--propose``: only the words the miner finds per topic domain (TOPIC) in the prompts of every
dataset but ``--hold-out``'s, without the instruction wrapper (``strip_wrapper``), printed
(``--json FILE``: written) for a person to review before any goes into policies/domains.yaml.

    python benchmarks/domain_accuracy.py [--data DIR] [--no-write] [--no-summary] [--no-speed] [--baseline REV]
    python benchmarks/domain_accuracy.py --propose [--hold-out DATASET ...] [--top N] [--json FILE]

Writes benchmarks/results/domain_accuracy.json, the figure blocks of docs/domain-accuracy.md (between
its <!-- domain-accuracy:NAME --> markers; the prose around them is hand-written) and the block of
docs/benchmarks.md (the summary the README links to) between <!-- domain-accuracy --> and
<!-- /domain-accuracy -->."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import bench
import yaml

from aisia_plugin import domain_eval
from aisia_plugin.domain_eval import MINER, documents, known_words, mine, mined_patterns
from aisia_plugin.domains import DomainDetector
from aisia_plugin.policy import load_policy
from aisia_plugin.resources import policies_dir

GSM8K = "routellm_gsm8k_responses.csv"
# The commit whose policies/domains.yaml is the vocabulary before issue 14's changes (the figures
# the issue quotes): the "before" of the before/after tables, read with git show.
BASELINE_REV = "ce978675ad89194a8cfc67f3cb40792e15eac412"
DOC = bench.REPO / "docs" / "domain-accuracy.md"
SUMMARY = bench.REPO / "docs" / "benchmarks.md"
TOPIC = ("math", "medical", "science", "legal", "finance")  # the domains whose words are mined
ARENA_DOMAINS = yaml.safe_load((bench.HERE / "routerarena_domains.yaml").read_text(encoding="utf-8"))
ARENA = ARENA_DOMAINS["file"]
ACCEPT = {ds: set(domains) for ds, domains in ARENA_DOMAINS["accepts"].items()}


def label_of(dataset: str):
    """The domain of a RouterArena source dataset (None: unlabelled)."""
    by_prefix = [d for prefix, d in ARENA_DOMAINS["prefixes"].items() if dataset.startswith(prefix)]
    return by_prefix[0] if by_prefix else ARENA_DOMAINS["labels"].get(dataset)


def strip_wrapper(prompt: str) -> str:
    """The prompt without the benchmark's instruction lines (first line, 'Provide/Keep' lines)."""
    return "\n".join(l for l in prompt.split("\n")[1:] if not l.lstrip().startswith(("Provide ", "Keep ", "Output ")))


def arena_labelled(rows, view=lambda prompt: prompt) -> list[tuple]:
    """(dataset, label, accepted domains, view(prompt)) per (dataset, prompt) of ``rows``: the
    labelled prompts of aisia_plugin.domain_eval."""
    return [(ds, label_of(ds), ACCEPT.get(ds, set()), view(q)) for ds, q in rows]


def score(predictions, rows, names):
    """Per-domain figures of ``predictions`` (one per (dataset, prompt) of ``rows``)."""
    return domain_eval.score(predictions, [r[:3] for r in arena_labelled(rows)], names)


def gsm8k_recall(detector, data: Path):
    if not (data / GSM8K).exists():
        return None
    preds = [detector.detect(row["prompt"]) for row in bench.read_csv(data / GSM8K)]
    other = dict(Counter(p for p in preds if p not in (None, "math")))  # in order of first prediction
    return {"prompts": len(preds), "math_recall": round(preds.count("math") / len(preds), 4), "other_domains": other}


def with_patterns(domains, extra: dict[str, str]):
    """The domains section with one more pattern per domain named in ``extra``."""
    defs = {n: d.model_copy(update={"patterns": list(d.patterns) + [extra[n]]}) if n in extra else d
            for n, d in domains.definitions.items()}
    return domains.model_copy(update={"definitions": defs})


def leave_one_dataset_out(domains, rows, names, params: dict, data: Path | None = None):
    """Each dataset held out in turn, detected with the vocabulary plus the words mined from the
    others: every prompt predicted once, by a vocabulary derived without its dataset. The shipped
    vocabulary alone (hand-written, so every prompt is held out) beside it, per domain and per
    held-out dataset, the words mined per fold, and the GSM8K recall of the words mined without
    RouterArena's GSM8K."""
    docs = documents(arena_labelled(rows, strip_wrapper))
    base = DomainDetector(domains)
    known = known_words(base, docs)
    shipped = [base.detect(q) for _, q in rows]
    mined, words, per_dataset = list(shipped), {}, {}
    datasets = sorted({ds for ds, _ in rows})
    for held in datasets:
        proposal = mine(docs, TOPIC, exclude={held}, known=known, **params)
        det = DomainDetector(with_patterns(domains, mined_patterns(proposal)))
        idx = [i for i, (ds, _) in enumerate(rows) if ds == held]
        for i in idx:
            mined[i] = det.detect(rows[i][1])
        label = label_of(held)
        if label in TOPIC:
            words[held] = {d: [w.word for w in ws] for d, ws in proposal.items() if ws}
        ok = lambda p: p == label or p in ACCEPT.get(held, set())  # noqa: E731
        per_dataset[held] = {"label": label, "prompts": len(idx), "shipped_correct": sum(ok(shipped[i]) for i in idx),
                             "mined_correct": sum(ok(mined[i]) for i in idx)}
    gsm = None
    if data is not None:
        gsm_words = mined_patterns(mine(docs, TOPIC, exclude={"GSM8K"}, known=known, **params))
        gsm = gsm8k_recall(DomainDetector(with_patterns(domains, gsm_words)), data)
    return {"folds": len(datasets), "miner": params, "shipped": score(shipped, rows, names),
            "shipped_plus_mined": score(mined, rows, names), "shipped_plus_mined_gsm8k": gsm,
            "per_dataset": per_dataset, "mined_words": words}


def baseline_domains(rev: str):
    """The domains section of policies/domains.yaml at git revision ``rev`` (the other policy files
    as they are now), read from the repository's history; None when git cannot show it."""
    try:
        old = subprocess.run(["git", "-C", str(bench.REPO), "show", f"{rev}:policies/domains.yaml"],
                             capture_output=True, check=True, timeout=30).stdout.decode("utf-8")
    except (OSError, subprocess.SubprocessError):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        for f in sorted(Path(policies_dir()).glob("*.yaml")):
            (Path(tmp) / f.name).write_text(old if f.name == "domains.yaml" else f.read_text(encoding="utf-8"),
                                            encoding="utf-8")
        # The copies are the whole policy (not layered over the shipped files, whose domains differ).
        (Path(tmp) / "zz-baseline.yaml").write_text("version: 1\ndefaults: false\n", encoding="utf-8")
        return load_policy([tmp]).domains


def speed(domains, rows, passes: int = 9):
    """detect() per prompt (us) over the prompts padded to 2 KB: a first pass on a fresh detector
    (RE2 builds its lazy DFA as it meets the text), then, after one more pass, the median of
    ``passes`` passes per prompt (warm); and the keyword-dense prompt, warm."""
    clock, two_kb = time.perf_counter_ns, bench.padded([p for _, p in rows])
    detector = DomainDetector(domains)

    def one(text):
        t = clock()
        detector.detect(text)
        return (clock() - t) / 1e3

    first = sorted(one(p) for p in two_kb)
    for p in two_kb:
        detector.detect(p)
    runs = [[one(p) for p in two_kb] for _ in range(passes)]
    warm = sorted(statistics.median(per_prompt) for per_prompt in zip(*runs))
    text = "\n".join(m["content"] for m in bench.dense_messages(2048))
    for _ in range(50):
        detector.detect(text)
    dense = sorted(one(text) for _ in range(1000))
    pct = bench.percentile
    return {"prompts": len(two_kb), "passes": passes, "median_us": round(statistics.median(warm), 2),
            "p99_us": round(pct(warm, 0.99), 2), "mean_us": round(statistics.mean(warm), 2),
            "first_pass_median_us": round(statistics.median(first), 2), "first_pass_p99_us": round(pct(first, 0.99), 2),
            "dense": {"median_us": round(statistics.median(dense), 2), "p99_us": round(pct(dense, 0.99), 2),
                      "keywords": sum(detector.counts(text)), "domain": detector.detect(text)}}


def doc_blocks(result) -> dict[str, list[str]]:
    """The figure blocks of docs/domain-accuracy.md by marker name; the prose around them (conditions,
    label mapping, reading of the numbers, the held-out method) is written by hand there."""
    full, bare, g, sp = result["full_prompt"], result["without_wrapper"], result["gsm8k"], result["speed"]
    figures = [
        *domain_eval.table(full, every=True, extra={"precision (no wrapper)": (bare, "precision"),
                                                    "recall (no wrapper)": (bare, "recall")}), "",
        f"- Overall accuracy (label or accepted domain): {full['accuracy']:.3f} (without wrapper: {bare['accuracy']:.3f}).",
        f"- False-positive rate on the {full['unlabelled']} unlabelled prompts (a domain where none is expected): "
        f"{full['unlabelled_false_positive_rate']:.3f} (without wrapper: {bare['unlabelled_false_positive_rate']:.3f}).",
    ]
    if g:
        figures.append(f"- RouteLLM GSM8K math recall: {g['math_recall']:.3f} over {g['prompts']} prompts "
                       f"(other domains predicted: {g['other_domains'] or 'none'}).")
    if sp:
        figures.append(f"- Speed of `detect` per 2 KB prompt ({sp['prompts']} RouterArena prompts, each padded to 2048 "
                       f"bytes with the prompts that follow it): median {sp['median_us']} us, p99 {sp['p99_us']} us, "
                       f"mean {sp['mean_us']} us (per prompt, the median of {sp['passes']} passes once RE2's lazy DFA "
                       f"is warm); on the first pass of a fresh detector, while the DFA meets the text, median "
                       f"{sp['first_pass_median_us']} us, p99 {sp['first_pass_p99_us']} us.")
        d = sp["dense"]
        figures.append(f"  The keyword-dense 2 KB prompt of `benchmarks/bench.py` ({d['keywords']} keywords, "
                       f"{d['domain']}): median {d['median_us']} us, p99 {d['p99_us']} us. A shared 2-CPU machine, "
                       "whose timings vary by up to 2x from run to run; see `aisia_plugin/domains.py` for the method.")
    errors = [f"- {k}: {v}" for k, v in list(full["errors"].items())[:15]]
    ba = before_after(result)
    return {"figures": figures, "errors": errors + ([""] + ba if ba else []), "held-out": held_out_figures(result)}


def stated(result) -> list[str]:
    """The run's conditions as the hand-written prose of docs/domain-accuracy.md states them: checked
    when the figures are written, so that a change of policy, data or miner cannot leave it stale."""
    p, lo, g = result["policy"], result["leave_one_dataset_out"], result["gsm8k"]
    m = lo["miner"]
    return [f"min_matches={p['min_matches']}, max_scan_chars={p['max_scan_chars']})",
            f"the {result['prompts']} RouterArena prompts of `{ARENA}`",
            *([f"The {g['prompts']} RouteLLM GSM8K prompts (`{GSM8K}`"] if g else []),
            f"come from {lo['folds']} source datasets",
            f"strength {m['prior']}; z >= {m['min_z']}, in at least {m['min_support']} prompts of the domain from at "
            f"least {m['min_datasets']} datasets, training precision >= {m['min_precision']}",
            f"at most {m['top']} per domain"]


def _pr(c):
    return f"{domain_eval.figure(c['precision'])} / {domain_eval.figure(c['recall'])}"


def before_after(result, heading: str = "## Before and after (issue 14)",
                 held_out: str = "#leave-one-dataset-out") -> list[str]:
    """The topic domains' figures of the baseline vocabulary and of the shipped one, side by side;
    `held_out` is the link to the page's "Leave one dataset out" section."""
    base = result.get("baseline")
    if not base:
        return []
    after, before = result["leave_one_dataset_out"]["shipped_plus_mined"], base["leave_one_dataset_out"]["shipped_plus_mined"]
    f_b, f_a = base["full_prompt"], result["full_prompt"]
    rows = [[n, _pr(f_b["domains"][n]), _pr(f_a["domains"][n]), _pr(before["domains"][n]), _pr(after["domains"][n])]
            for n in ("math", "medical", "science", "legal", "finance", "coding")]
    rows += [[f"false-positive rate, {f_a['unlabelled']} unlabelled prompts"]
             + [f"{r['unlabelled_false_positive_rate']:.3f}" for r in (f_b, f_a, before, after)],
             ["accuracy (label or accepted domain)"] + [f"{r['accuracy']:.3f}" for r in (f_b, f_a, before, after)]]
    g_b, g_a = base.get("gsm8k"), result.get("gsm8k")
    if g_a and g_b:
        mg_b = base["leave_one_dataset_out"]["shipped_plus_mined_gsm8k"]
        mg_a = result["leave_one_dataset_out"]["shipped_plus_mined_gsm8k"]
        rows.append([f"RouteLLM GSM8K math recall ({g_a['prompts']} prompts, another source)"]
                    + [f"{r['math_recall']:.3f}" for r in (g_b, g_a, mg_b, mg_a)])
    sp_b, sp_a = base.get("speed"), result.get("speed")
    if sp_a and sp_b:
        rows += [[title, *(f"{sp[pass_ + 'median_us']} / {sp[pass_ + 'p99_us']}" for sp in (sp_b, sp_a)), "", ""]
                 for title, pass_ in (("`detect` per 2 KB prompt, median / p99 (us)", ""),
                                      ("first pass of a fresh detector, median / p99 (us)", "first_pass_"))]
    return [heading, "",
            f"Before: `policies/domains.yaml` at `{base['revision'][:10]}` (read with `git show`); after: the shipped "
            "one. Both run in the same process on the same prompts. Precision / recall on the 809 RouterArena prompts; "
            f"each column of figures is held out in the sense of [Leave one dataset out]({held_out}): the "
            "shipped words are hand-written, the mined ones derived without the prompt's dataset.", "",
            *bench.md_table(["domain", "before", "after", "before + mined", "after + mined"], rows, "---:")]


def held_out_figures(result) -> list[str]:
    lo = result["leave_one_dataset_out"]
    out = [*bench.md_table(["held-out dataset", "label", "prompts", "correct, shipped", "correct, shipped + mined"],
                           [[ds, c["label"], c["prompts"], c["shipped_correct"], c["mined_correct"]]
                            for ds, c in lo["per_dataset"].items() if c["label"] in TOPIC],
                           ("---", "---:", "---:", "---:")),
           "", "Words mined in the folds of the topic datasets (the fold's held-out dataset left out of the mining):", ""]
    for ds, words in lo["mined_words"].items():
        listed = "; ".join(f"{d}: {', '.join(ws[:12])}{' ...' if len(ws) > 12 else ''}" for d, ws in words.items())
        out.append(f"- {ds}: {listed or 'none'}")
    return out


def summary_block(result) -> list[str]:
    """docs/benchmarks.md's block between the domain-accuracy markers (the prose around it is hand-written)."""
    full = result["full_prompt"]
    return [*domain_eval.table(full),  # the domains with a labelled or a predicted prompt
            "", "(image, voice, transcription, vision, embedding, classification and sentiment have no labelled prompt",
            f"here and were predicted for none.) False-positive rate on the {full['unlabelled']} unlabelled prompts: "
            f"{full['unlabelled_false_positive_rate']:.3f}.", "",
            *before_after(result, "Topic domains before and after issue 14 (precision / recall):",
                         f"{DOC.name}#leave-one-dataset-out")]


def propose(domains, rows, hold_out: list[str], params: dict, out: Path | None) -> None:
    """``--propose``: the words mined per topic domain outside ``hold_out``, printed (and written to ``out``)."""
    docs = documents(arena_labelled(rows, strip_wrapper))
    proposal = mine(docs, TOPIC, exclude=hold_out, known=known_words(DomainDetector(domains), docs), **params)
    print(f"mined from {sum(d[0] not in set(hold_out) for d in docs)} prompts (held out: {hold_out or 'none'}); {params}")
    for dom, words in proposal.items():
        print(f"\n{dom}: {len(words)} words")
        for w in words:
            print(f"  {w.word:22} z={w.z:6.2f} support={w.support:3} others={w.others:3} "
                  f"datasets={w.datasets} precision={w.precision:.2f}")
    if out:
        out.write_text(json.dumps({d: [asdict(w) for w in ws] for d, ws in proposal.items()}, indent=2) + "\n",
                       encoding="utf-8")


def measure(domains, rows, names, data, no_speed, params) -> dict:
    detector = DomainDetector(domains)
    return {"full_prompt": score([detector.detect(q) for _, q in rows], rows, names),
            "without_wrapper": score([detector.detect(strip_wrapper(q)) for _, q in rows], rows, names),
            "gsm8k": gsm8k_recall(detector, data),
            "leave_one_dataset_out": leave_one_dataset_out(domains, rows, names, params, data),
            "speed": None if no_speed else speed(domains, rows)}


def main(argv=None):
    args = bench.arguments(__doc__, argv, data=bench.shared_data_dir(), no_write=False,
                           baseline=(BASELINE_REV, "git revision whose policies/domains.yaml is the 'before' vocabulary "
                                                   "('' for none)"),
                           no_speed=(False, "skip the timings (a quick accuracy run)"),
                           no_summary=(False, "do not regenerate docs/benchmarks.md's domain-accuracy block"),
                           propose=(False, "only print the words mined from the prompts, for review"),
                           hold_out=([], "with --propose: datasets left out of the mining"),
                           json=(Path, "with --propose: write the proposal to this file"), **MINER)
    policy = load_policy()
    names = list(policy.domains.definitions)
    rows = [(r["global_index"].rsplit("_", 1)[0], r["question"]) for r in bench.read_jsonl(args.data / ARENA)]  # (dataset, prompt)
    params = {k: getattr(args, k) for k in MINER}
    if args.propose:
        return propose(policy.domains, rows, args.hold_out, params, args.json)
    result = {"data": ARENA, "prompts": len(rows),
              "policy": {"min_matches": policy.domains.min_matches, "max_scan_chars": policy.domains.max_scan_chars},
              **measure(policy.domains, rows, names, args.data, args.no_speed, params), "baseline": None}
    before = baseline_domains(args.baseline) if args.baseline else None
    if before is not None:
        result["baseline"] = {"revision": args.baseline, **measure(before, rows, names, args.data, args.no_speed, params)}
    blocks = doc_blocks(result)
    print("\n\n".join("\n".join(lines) for lines in blocks.values()))
    if not args.no_write:
        bench.write_results("domain_accuracy", result)
        bench.replace_blocks(DOC, {f"domain-accuracy:{name}": lines for name, lines in blocks.items()})
        prose = DOC.read_text(encoding="utf-8")
        for fact in stated(result):
            if fact not in prose:
                print(f"{DOC.name}: the hand-written prose does not state this run's {fact!r}; update it", file=sys.stderr)
        if not args.no_summary:
            bench.replace_blocks(SUMMARY, {"domain-accuracy": summary_block(result)})


if __name__ == "__main__":
    main()
