"""Per-domain keywords mined from RouterArena's prompts labelled by domain (the discriminative
words of each topic domain, for a person to review before any goes into policies/domains.yaml).
benchmarks/domain_accuracy.py measures the shipped detection on the same prompts.

Labels: the source dataset (the prefix of ``global_index``) names the domain (bench.ARENA_LABELS);
an ambiguous dataset has none but accepts some (bench.ARENA_ACCEPT). Each prompt is read without
the benchmarks' instruction wrapper (``bench.strip_wrapper``), so that no template word is
proposed, as a set of lower-case words of at least MIN_LENGTH letters (a document frequency).

A word w of domain d is scored by the log-odds ratio of "a prompt contains w" between the
prompts labelled d and every other prompt (those only accepting d on neither side), with an
informative Beta prior (Monroe, Colaresi and Quinn 2008, "Fightin' words", binomial form): with
p_w the share of all training prompts containing w and a0 the prior's strength,

    alpha = a0 * p_w,  beta = a0 * (1 - p_w)
    delta = log((y_in + alpha) / (n_in - y_in + beta)) - log((y_out + alpha) / (n_out - y_out + beta))
    z     = delta / sqrt(1/(y_in + alpha) + 1/(n_in - y_in + beta) + 1/(y_out + alpha) + 1/(n_out - y_out + beta))

It is proposed when z >= min_z, it is in at least min_support prompts of d from at least
min_datasets datasets of d (one dataset's artefact is not the domain's), its training precision
(the accepted prompts counting for d) is at least min_precision, and the policy's patterns do not
already match it. ``mine(docs, exclude=...)`` leaves datasets out (leave one dataset out);
``mined_patterns`` turns a proposal into one RE2 pattern per domain.

    python benchmarks/domain_vocabulary.py [--hold-out DATASET ...] [--top N] [--domains math,...] [--json FILE]"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import bench

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
    for ch in text.lower() + " ":
        if ch.isalpha():
            cur.append(ch)
        else:
            if len(cur) >= MIN_LENGTH:
                out.add("".join(cur))
            cur = []
    return out


def documents(rows):
    """(dataset, label, accepted domains, word set) per prompt, the wrapper removed."""
    return [(ds, bench.arena_label(ds), bench.ARENA_ACCEPT.get(ds, set()), words_of(bench.strip_wrapper(q)))
            for ds, q in rows]


def known_words(detector, vocabulary) -> set[str]:
    """The words of ``vocabulary`` that the policy's patterns already match on their own."""
    return {w for w in vocabulary if any(detector.counts(w))}


def _frequencies(docs, among=None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for *_, ws in docs:
        for w in ws:
            if among is None or w in among:
                counts[w] = counts.get(w, 0) + 1
    return counts


def mine(docs, domains=TOPIC_DOMAINS, exclude=(), known=frozenset(), min_z=DEFAULTS["min_z"],
         min_support=DEFAULTS["min_support"], min_datasets=DEFAULTS["min_datasets"],
         min_precision=DEFAULTS["min_precision"], prior=DEFAULTS["prior"], top=DEFAULTS["top"]):
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


def main(argv=None):
    args = bench.arguments(__doc__, argv, data=bench.shared_data_dir(), hold_out=([], "datasets left out of the mining"),
                           domains=",".join(TOPIC_DOMAINS), json=(Path, "write the proposal to this file"), **DEFAULTS)
    from aisia_plugin.policy import default_domain_detector

    docs = documents(bench.arena_prompts(args.data))
    params = {k: getattr(args, k) for k in DEFAULTS}
    known = known_words(default_domain_detector(), set().union(*(d[3] for d in docs)))
    proposal = mine(docs, args.domains.split(","), exclude=args.hold_out, known=known, **params)
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
