"""Per-domain keywords mined from RouterArena's prompts labelled by domain (the discriminative
words of each topic domain, for a person to review before any goes into policies/domains.yaml),
by the package's miner (aisia_plugin/domain_eval.py: the method, and its thresholds as options
here). benchmarks/domain_accuracy.py measures the shipped detection on the same prompts, and
mines with each dataset held out in turn.

Labels: the source dataset (the prefix of ``global_index``) names the domain (bench.ARENA_LABELS);
an ambiguous dataset has none but accepts some (bench.ARENA_ACCEPT). Each prompt is read without
the benchmarks' instruction wrapper (``bench.strip_wrapper``), so that no template word is
proposed.

    python benchmarks/domain_vocabulary.py [--hold-out DATASET ...] [--top N] [--domains math,...] [--json FILE]"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import bench

from aisia_plugin.domain_eval import MINER, documents, known_words, mine

TOPIC_DOMAINS = ("math", "medical", "science", "legal", "finance")


def main(argv=None):
    args = bench.arguments(__doc__, argv, data=bench.shared_data_dir(), hold_out=([], "datasets left out of the mining"),
                           domains=",".join(TOPIC_DOMAINS), json=(Path, "write the proposal to this file"), **MINER)
    from aisia_plugin.policy import default_domain_detector

    docs = documents(bench.arena_labelled(bench.arena_prompts(args.data), bench.strip_wrapper))
    params = {k: getattr(args, k) for k in MINER}
    proposal = mine(docs, args.domains.split(","), exclude=args.hold_out,
                    known=known_words(default_domain_detector(), docs), **params)
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
