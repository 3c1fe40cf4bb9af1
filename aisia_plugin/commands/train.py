"""`aisia train`: fit the contextual strategy's model offline from a trace, for an alias's
``contextual.prior_model``.

    aisia train --data TRACE.jsonl --out model.json [--policy PATH] [--alias auto] [--deployments cands.yaml]
    aisia train --data TRACE.jsonl --holdout 0.5 [--out model.json]


Full information: every candidate's recorded outcome of every request is learned (a trace of
replayed or logged outcomes; a candidate missing from a line is simply not learned there). The
reward of an outcome is the one the engine computes online (the policy's reward, the alias's SLA
target), the features the engine's (the alias's domain and task hints apply), the settings
(prior and noise variance) the alias's ``contextual`` section.

``--exact``: the slots' means solved exactly (the ridge posterior of the same linear model, by
conjugate gradients) rather than by one pass of the online update; the file is the same.

``--holdout FRACTION``: the model is fitted on the first part of the trace only, and the last
FRACTION held out to measure it: a greedy router reading its predictions there, swept over the
cost weight, against the same router reading other models of the same rows (the same features
solved exactly, without hashing, logistic, shared across deployments...: ``model_variants``),
each deployment's mean reward, its mean per domain and per label, and the oracle
(``aisia_plugin/replay/training.py``). Does the model rank the
deployments per prompt better than a context-free or per-domain router could?

Exit status: 0 written; 1 invalid policy, trace or candidates file; 2 usage or I/O errors."""

from __future__ import annotations

import sys

from . import read_input


def add_arguments(p):
    p.add_argument("--data", required=True, metavar="TRACE.jsonl", help="the trace (the format of aisia replay --data)")
    p.add_argument("--out", metavar="MODEL.json", help="where to write the model (required without --holdout)")
    p.add_argument("--policy", action="append", metavar="PATH", help="policy file or directory (repeatable)")
    p.add_argument("--alias", default="auto", help="the alias whose features, reward and settings apply (default: auto)")
    p.add_argument("--deployments", metavar="FILE.yaml", help="replay candidates file (prices, latency models)")
    p.add_argument("--passes", type=int, default=1, help="passes over the trace (default 1)")
    p.add_argument("--exact", action="store_true",
                   help="solve the model's slots exactly (ridge by conjugate gradients, replay.training.fit_exact) "
                        "instead of one pass of the online update per outcome")
    p.add_argument("--seed", type=int, default=0, help="seed of the candidates' latency models")
    p.add_argument("--holdout", type=float, metavar="FRACTION",
                   help="fit on the first part only and print how the model's greedy choice does on the last "
                        "FRACTION (0 < FRACTION < 1), beside reference predictors and the oracle")


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def run(args) -> int:
    from ..contextual_io import save_model_file
    from ..policy import PolicyError, load_policy
    from ..replay.candidates import CandidatesError, load_candidates
    from ..replay.runner import build_scenario
    from ..replay.trace import TraceError, load_trace
    from ..replay.training import evaluate, fit, fit_exact, format_holdout, reference_predictors, split, training_rows

    if not 1 <= args.passes <= 100:
        _err("aisia train: --passes must be from 1 to 100")
        return 2
    if args.holdout is not None and not 0.0 < args.holdout < 1.0:
        _err("aisia train: --holdout must lie strictly between 0 and 1 (the share of the trace held out)")
        return 2
    if args.out is None and args.holdout is None:
        _err("aisia train: --out MODEL.json is required (or --holdout FRACTION to measure without writing)")
        return 2
    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        _err(str(exc))
        return 1
    ap = policy.aliases.get(args.alias)
    if ap is None:
        _err(f"aisia train: unknown alias {args.alias!r}; known: {', '.join(policy.aliases)}")
        return 2
    trace = read_input("train", load_trace, TraceError, args.data, "the trace")
    if isinstance(trace, int):
        return trace
    specs = (read_input("train", load_candidates, CandidatesError, args.deployments, "the candidates file")
             if args.deployments else {})
    if isinstance(specs, int):
        return specs
    scenario = build_scenario(trace, specs, policy, seed=args.seed)
    rows = training_rows(policy, args.alias, trace, scenario)
    held = None
    if args.holdout is not None:
        held = split(policy, rows, scenario, args.holdout)
        if not held.train or not held.test:
            _err(f"aisia train: --holdout {args.holdout:g} leaves no request on one side of {len(rows)}")
            return 2
        rows = held.train
    model = fit_exact(rows, ap.contextual) if args.exact else fit(rows, ap.contextual, passes=args.passes)
    if held is not None:
        figs = evaluate(held, reference_predictors(held, model, ap.contextual,
                                                   "model (fit_exact)" if args.exact else "model (fit_full_information)"))
        print("\n".join(format_holdout(figs, len(held.train), len(held.test))))
        if args.out is None:
            return 0
    trained = {"data": str(args.data), "alias": args.alias, "requests": len(rows), "passes": args.passes, "exact": args.exact,
               "deployments": sorted(model.ids)}
    try:
        save_model_file(model, args.out, trained=trained)
    except OSError as exc:
        _err(f"aisia train: cannot write {args.out}: {exc.strerror or exc}")
        return 2
    print(f"trained on {len(rows)} requests ({', '.join(sorted(model.ids))}); model written to {args.out}")
    return 0
