"""How well domain predictions match labelled prompts (`aisia validate --domain-prompts`, and the
benchmark on RouterArena's prompts): per-domain precision and recall, the accuracy, the
false-positive rate on the prompts that expect no domain, and the most frequent confusions.

A prompt's label is a domain, or None (no domain expected). An ambiguous prompt may also accept
other domains: a prediction of an accepted domain (or None) is correct, counted in the domain's
`accepted_other` and never as a false positive, and the prompt is in no recall support.
Precision = (tp + accepted_other) / predicted; recall = tp / support."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence


def score(predictions: Sequence[Optional[str]], labels: Iterable[tuple[str, Optional[str], set]],
          names: Iterable[str]) -> dict:
    """Per-domain figures of ``predictions`` (a domain or None per prompt) against ``labels``:
    (source, label, accepted domains) per prompt, the source naming the prompt in a confusion
    ("source -> predicted"). ``names`` are the domains reported (the policy's, in its order)."""
    per = {n: {"tp": 0, "fp": 0, "fn": 0, "support": 0, "predicted": 0, "accepted_other": 0} for n in names}
    correct = unlabelled = unlabelled_fp = total = 0
    confusions: dict[str, int] = {}
    for (source, label, accept), pred in zip(labels, predictions):
        total += 1
        if label is not None:
            per[label]["support"] += 1
        if pred is not None:
            per[pred]["predicted"] += 1
        ok = pred == label or pred in accept
        correct += ok
        if label is None and not accept:
            unlabelled += 1
            unlabelled_fp += pred is not None
        if pred == label and label is not None:
            per[label]["tp"] += 1
            continue
        if label is not None:
            per[label]["fn"] += 1
        if pred is not None:
            per[pred]["accepted_other" if pred in accept else "fp"] += 1
        if not ok:
            confusions[f"{source} -> {pred}"] = confusions.get(f"{source} -> {pred}", 0) + 1
    table = {n: {"support": c["support"], "predicted": c["predicted"], "tp": c["tp"], "fp": c["fp"],
                 "accepted_other": c["accepted_other"],
                 "precision": round((c["tp"] + c["accepted_other"]) / c["predicted"], 4) if c["predicted"] else None,
                 "recall": round(c["tp"] / c["support"], 4) if c["support"] else None} for n, c in per.items()}
    return {"domains": table, "accuracy": round(correct / total, 4) if total else None, "unlabelled": unlabelled,
            "unlabelled_false_positive_rate": round(unlabelled_fp / unlabelled, 4) if unlabelled else None,
            "errors": dict(sorted(confusions.items(), key=lambda kv: -kv[1]))}


def figure(v: Optional[float]) -> str:
    """A precision or recall as shown: two decimals, "-" when undefined (nothing to divide by)."""
    return "-" if v is None else f"{v:.2f}"


def table(report: dict, every: bool = False, extra: Optional[dict] = None) -> list[str]:
    """The per-domain figures as a Markdown table; only the domains with a labelled or a predicted
    prompt unless ``every``. ``extra``: column name -> (report, field) of a second report beside."""
    extra = extra or {}
    head = ["domain", "support", "predicted", "tp", "fp", "acc.", "precision", "recall", *extra]
    rows = [[n, c["support"], c["predicted"], c["tp"], c["fp"], c["accepted_other"], figure(c["precision"]),
             figure(c["recall"]), *(figure(r["domains"][n][f]) for r, f in extra.values())]
            for n, c in report["domains"].items() if every or c["support"] or c["predicted"]]
    return ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)] + [
        "| " + " | ".join(str(c) for c in row) + " |" for row in rows]
