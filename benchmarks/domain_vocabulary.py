"""Propose per-domain keywords mined from labelled prompts: the discriminative words of each topic
domain, for a person to review before any goes into policies/domains.yaml.

The prompts are RouterArena's (benchmarks/domain_accuracy.py reads them and their labels: the
source dataset, the prefix of ``global_index``). Each prompt is read without the benchmarks'
instruction wrapper (domain_accuracy.strip_wrapper: its first line and its "Provide/Keep" lines),
so that no template word is proposed, and as a set of lower-case words of at least
``MIN_LENGTH`` letters (a document frequency: a long passage repeating a word counts once).

For a domain d, a word w is scored by the log-odds ratio of "a prompt contains w" between the
prompts labelled d and every other prompt of the training set (the prompts of a dataset that only
*accepts* d, ACCEPT in domain_accuracy.py, are on neither side), with an informative Beta prior
(Monroe, Colaresi and Quinn 2008, "Fightin' words", in its binomial form): with p_w the share of
all training prompts containing w and a0 the prior's strength,

    alpha = a0 * p_w,  beta = a0 * (1 - p_w)
    delta = log((y_in + alpha) / (n_in - y_in + beta)) - log((y_out + alpha) / (n_out - y_out + beta))
    z     = delta / sqrt(1/(y_in + alpha) + 1/(n_in - y_in + beta) + 1/(y_out + alpha) + 1/(n_out - y_out + beta))

A word is proposed when z >= ``min_z`` and it has the support that makes it likely to generalise:
in at least ``min_support`` prompts of d, from at least ``min_datasets`` distinct datasets of d (a
word seen in a single dataset is more likely that dataset's artefact than the domain's), and
with a training precision (the share of the prompts containing it that are labelled d, the
accepted ones counting for d) of at least ``min_precision``. Words the policy's patterns already
match (for any domain: an occurrence counts for the first domain matching it) are left out.

Leave one dataset out: ``mine(rows, exclude=...)`` mines without the prompts of the datasets
named, which is what benchmarks/domain_accuracy.py does for each held-out dataset; ``--hold-out``
does the same here. ``mined_patterns`` turns a proposal into one RE2 pattern per domain
(``\\b(?:w1|w2|...)\\b``), the form in which the evaluation adds it to the shipped vocabulary.

Usage: python benchmarks/domain_vocabulary.py [--data DIR] [--hold-out DATASET ...] [--top N]
       [--domains math,medical,...] [--json FILE]
Prints each domain's proposed words with their figures (z, support, datasets, precision)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from domain_accuracy import ACCEPT, DEFAULT_DATA, label_of, load, strip_wrapper  # noqa: E402

TOPIC_DOMAINS = ("math", "medical", "science", "legal", "finance")
MIN_LENGTH = 4
DEFAULTS = {"min_z": 3.0, "min_support": 3, "min_datasets": 2, "min_precision": 0.8, "prior": 10.0, "top": 40}


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
    for ch in text.lower():
        if ch.isalpha():
            cur.append(ch)
        else:
            if len(cur) >= MIN_LENGTH:
                out.add("".join(cur))
            cur = []
    if len(cur) >= MIN_LENGTH:
        out.add("".join(cur))
    return out


def documents(rows):
    """(dataset, label, accepted domains, word set) per prompt, the wrapper removed."""
    return [(ds, label_of(ds), ACCEPT.get(ds, set()), words_of(strip_wrapper(q))) for ds, q in rows]


def known_words(detector, vocabulary) -> set[str]:
    """The words of ``vocabulary`` that the policy's patterns already match on their own."""
    return {w for w in vocabulary if any(detector.counts(w))}


def mine(docs, domains=TOPIC_DOMAINS, exclude=(), known=frozenset(), min_z=DEFAULTS["min_z"],
         min_support=DEFAULTS["min_support"], min_datasets=DEFAULTS["min_datasets"],
         min_precision=DEFAULTS["min_precision"], prior=DEFAULTS["prior"], top=DEFAULTS["top"]):
    """domain -> its proposed words (best z first), mined from ``docs`` without the datasets in
    ``exclude``; ``known`` are words left out (those the policy already matches)."""
    exclude = set(exclude)
    train = [d for d in docs if d[0] not in exclude]
    n_all = len(train)
    df_all: dict[str, int] = {}
    for _, _, _, ws in train:
        for w in ws:
            df_all[w] = df_all.get(w, 0) + 1
    result = {}
    for dom in domains:
        inside = [d for d in train if d[1] == dom]
        outside = [d for d in train if d[1] != dom and dom not in d[2]]
        n_in, n_out = len(inside), len(outside)
        if not inside or not outside:
            result[dom] = []
            continue
        y_in: dict[str, int] = {}
        where: dict[str, set] = {}
        for ds, _, _, ws in inside:
            for w in ws:
                y_in[w] = y_in.get(w, 0) + 1
                where.setdefault(w, set()).add(ds)
        y_out: dict[str, int] = {}
        for _, _, _, ws in outside:
            for w in ws:
                if w in y_in:
                    y_out[w] = y_out.get(w, 0) + 1
        accepted = [d for d in train if d[1] != dom and dom in d[2]]
        y_acc: dict[str, int] = {}
        for _, _, _, ws in accepted:
            for w in ws:
                if w in y_in:
                    y_acc[w] = y_acc.get(w, 0) + 1
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
            delta = (math.log((yi + alpha) / (n_in - yi + beta))
                     - math.log((yo + alpha) / (n_out - yo + beta)))
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
        if not words:
            continue
        ascii_ = sorted(w.word for w in words if w.word[0].isascii())
        other = sorted(w.word for w in words if not w.word[0].isascii())
        parts = []
        if ascii_:
            parts.append("\\b(?:" + "|".join(ascii_) + ")\\b")
        if other:
            parts.append("(?:" + "|".join(other) + ")\\b")
        out[dom] = "|".join(parts)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--hold-out", nargs="*", default=[], help="datasets left out of the mining")
    ap.add_argument("--domains", default=",".join(TOPIC_DOMAINS))
    ap.add_argument("--json", type=Path, help="write the proposal to this file")
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    args = ap.parse_args(argv)
    from aisia_plugin.domains import DomainDetector
    from aisia_plugin.policy import load_policy

    docs = documents(load(args.data))
    detector = DomainDetector(load_policy().domains)
    vocabulary = set().union(*(d[3] for d in docs))
    params = {k: getattr(args, k) for k in DEFAULTS}
    proposal = mine(docs, args.domains.split(","), exclude=args.hold_out,
                    known=known_words(detector, vocabulary), **params)
    print(f"mined from {sum(d[0] not in set(args.hold_out) for d in docs)} prompts "
          f"(held out: {args.hold_out or 'none'}); {params}")
    for dom, words in proposal.items():
        print(f"\n{dom}: {len(words)} words")
        for w in words:
            print(f"  {w.word:22} z={w.z:6.2f} support={w.support:3} others={w.others:3} "
                  f"datasets={w.datasets} precision={w.precision:.2f}")
    if args.json:
        args.json.write_text(json.dumps({d: [asdict(w) for w in ws] for d, ws in proposal.items()}, indent=2) + "\n",
                             encoding="utf-8")


if __name__ == "__main__":
    main()
