"""A policy's domain vocabulary against labelled prompts (`aisia validate --domain-prompts`, and
the benchmark on RouterArena's prompts): how well the detection's predictions match the labels,
and which words the vocabulary lacks.

A prompt's label is a domain, or None (no domain expected). An ambiguous prompt may also accept
other domains: a prediction of an accepted domain (or None) is correct, counted in the domain's
`accepted_other` and never as a false positive, and the prompt is in no recall support.
Precision = (tp + accepted_other) / predicted; recall = tp / support.

Words to propose (``mine``), for a person to review before any goes into a policy: each prompt is
read as the set of its lower-case words of at least MIN_LENGTH letters (a document frequency). A
word w of domain d is scored by the log-odds ratio of "a prompt contains w" between the prompts
labelled d and every other prompt (those only accepting d on neither side), with an informative
Beta prior (Monroe, Colaresi and Quinn 2008, "Fightin' words", binomial form): with p_w the share
of all training prompts containing w and a0 the prior's strength,

    alpha = a0 * p_w,  beta = a0 * (1 - p_w)
    delta = log((y_in + alpha) / (n_in - y_in + beta)) - log((y_out + alpha) / (n_out - y_out + beta))
    z     = delta / sqrt(1/(y_in + alpha) + 1/(n_in - y_in + beta) + 1/(y_out + alpha) + 1/(n_out - y_out + beta))

It is proposed when z >= min_z, it is in at least min_support prompts of d from at least
min_datasets datasets of d (one dataset's artefact is not the domain's), its training precision
(the accepted prompts counting for d) is at least min_precision, and the policy's patterns do not
already match it. ``mine(docs, exclude=...)`` leaves datasets out (leave one dataset out);
``mined_patterns`` turns a proposal into one RE2 pattern per domain."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

MIN_LENGTH = 4
MINER = {"min_z": 3.0, "min_support": 3, "min_datasets": 2, "min_precision": 0.8, "prior": 10.0, "top": 40}


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


# -- words to propose ------------------------------------------------------------------------------
@dataclass
class Word:
    word: str
    z: float
    support: int  # prompts of the domain containing it
    others: int  # other prompts containing it (not labelled d, not accepting d)
    datasets: int  # distinct datasets of the domain among its support
    precision: float


def words_of(text: str) -> set[str]:
    """The distinct lower-case words of ``text`` (runs of letters, at least MIN_LENGTH long)."""
    out, cur = set(), []
    for ch in text.lower() + " ":
        if ch.isalpha():
            cur.append(ch)
        else:
            if len(cur) >= MIN_LENGTH:
                out.add("".join(cur))
            cur = []
    return out


def documents(labelled) -> list[tuple]:
    """(dataset, label, accepted domains, word set) per (dataset, label, accepted, text)."""
    return [(ds, label, accept, words_of(text)) for ds, label, accept, text in labelled]


def known_words(detector, docs) -> set[str]:
    """The words of ``docs`` that the detector's patterns already match on their own."""
    return {w for w in set().union(*(d[3] for d in docs)) if any(detector.counts(w))}


def _frequencies(docs, among=None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for *_, ws in docs:
        for w in ws:
            if among is None or w in among:
                counts[w] = counts.get(w, 0) + 1
    return counts


def mine(docs, domains, exclude=(), known=frozenset(), min_z=MINER["min_z"], min_support=MINER["min_support"],
         min_datasets=MINER["min_datasets"], min_precision=MINER["min_precision"], prior=MINER["prior"],
         top=MINER["top"]) -> dict[str, list[Word]]:
    """domain -> its proposed words (best z first), mined from ``docs`` without the datasets in
    ``exclude``; ``known`` are words left out (those the policy already matches)."""
    train = [d for d in docs if d[0] not in set(exclude)]
    n_all, df_all = len(train), _frequencies(train)
    result = {}
    for dom in domains:
        inside = [d for d in train if d[1] == dom]
        outside = [d for d in train if d[1] != dom and dom not in d[2]]
        n_in, n_out = len(inside), len(outside)
        if not inside or not outside:
            result[dom] = []
            continue
        y_in, where = _frequencies(inside), {}
        for ds, _, _, ws in inside:
            for w in ws:
                where.setdefault(w, set()).add(ds)
        y_out = _frequencies(outside, y_in)
        y_acc = _frequencies([d for d in train if d[1] != dom and dom in d[2]], y_in)
        found = []
        for w, yi in y_in.items():
            if yi < min_support or len(where[w]) < min_datasets or w in known:
                continue
            yo = y_out.get(w, 0)
            precision = (yi + y_acc.get(w, 0)) / (yi + yo + y_acc.get(w, 0))
            if precision < min_precision:
                continue
            p = (df_all[w] + 0.5) / (n_all + 1.0)
            alpha, beta = prior * p, prior * (1.0 - p)
            delta = math.log((yi + alpha) / (n_in - yi + beta)) - math.log((yo + alpha) / (n_out - yo + beta))
            var = 1 / (yi + alpha) + 1 / (n_in - yi + beta) + 1 / (yo + alpha) + 1 / (n_out - yo + beta)
            z = delta / math.sqrt(var)
            if z >= min_z:
                found.append(Word(w, round(z, 3), yi, yo, len(where[w]), round(precision, 3)))
        found.sort(key=lambda x: (-x.z, x.word))
        result[dom] = found[:top]
    return result


def mined_patterns(proposal) -> dict[str, str]:
    """domain -> one RE2 pattern matching its proposed words as whole words. RE2's \\b is
    ASCII-only (no boundary before an accented letter), so such a word gets no leading \\b."""
    out = {}
    for dom, words in proposal.items():
        ascii_ = sorted(w.word for w in words if w.word[0].isascii())
        other = sorted(w.word for w in words if not w.word[0].isascii())
        parts = (["\\b(?:" + "|".join(ascii_) + ")\\b"] if ascii_ else []) + (
            ["(?:" + "|".join(other) + ")\\b"] if other else [])
        if parts:
            out[dom] = "|".join(parts)
    return out
