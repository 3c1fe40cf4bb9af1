"""`aisia train`: fit the contextual strategy's model offline from a trace, for an alias's
``contextual.prior_model``.

    aisia train --data TRACE.jsonl --out model.json [--policy PATH] [--alias auto] [--deployments cands.yaml]

Full information: every candidate's recorded outcome of every request is learned (a trace of
replayed or logged outcomes; a candidate missing from a line is simply not learned there). The
reward of an outcome is the one the engine computes online (the policy's reward, the alias's SLA
target), the features the engine's (the alias's domain and task hints apply), the settings
(prior and noise variance) the alias's ``contextual`` section.

Exit status: 0 written; 1 invalid policy, trace or candidates file; 2 usage or I/O errors."""

from __future__ import annotations

import sys


def add_arguments(p):
    p.add_argument("--data", required=True, metavar="TRACE.jsonl", help="the trace (the format of aisia replay --data)")
    p.add_argument("--out", required=True, metavar="MODEL.json", help="where to write the model")
    p.add_argument("--policy", action="append", metavar="PATH", help="policy file or directory (repeatable)")
    p.add_argument("--alias", default="auto", help="the alias whose features, reward and settings apply (default: auto)")
    p.add_argument("--deployments", metavar="FILE.yaml", help="replay candidates file (prices, latency models)")
    p.add_argument("--passes", type=int, default=1, help="passes over the trace (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the candidates' latency models")


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def _read(load, invalid, path, what):
    """load(path), or the exit status after the message: 1 invalid (its located problems), 2
    unreadable."""
    try:
        return load(path)
    except invalid as exc:
        _err(str(exc))
        return 1
    except (OSError, UnicodeDecodeError) as exc:
        _err(f"aisia train: cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}")
        return 2


def training_rows(policy, alias: str, trace, scenario) -> list[tuple]:
    """Per request of the trace: (its context vector, every candidate's reward, its domain, its
    features), with the engine's features and reward for ``alias``: what the model is fitted on."""
    from ..contextual import request_vector
    from ..engine import Engine
    from ..outcome import reward

    ap, engine, rows = policy.aliases[alias], Engine(policy), []
    for rec, calls in zip(trace.records, scenario.calls):
        feats, present = engine.scanner.scan(rec.messages, None, None)
        domain = ap.domain_hint or engine.detector.detect(feats.text, present)
        rewards = {name: reward(call.outcome(), policy.reward, ap.sla.target_p95_ms) for name, call in calls.items()}
        rows.append((request_vector(feats, domain, ap.task_hint or feats.task_type), rewards, domain, feats))
    return rows


def run(args) -> int:
    from ..contextual import fit_full_information
    from ..contextual_io import save_model_file
    from ..policy import PolicyError, load_policy
    from ..replay.candidates import CandidatesError, load_candidates
    from ..replay.runner import build_scenario
    from ..replay.trace import TraceError, load_trace

    if not 1 <= args.passes <= 100:
        _err("aisia train: --passes must be from 1 to 100")
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
    trace = _read(load_trace, TraceError, args.data, "the trace")
    if isinstance(trace, int):
        return trace
    specs = _read(load_candidates, CandidatesError, args.deployments, "the candidates file") if args.deployments else {}
    if isinstance(specs, int):
        return specs
    rows = [(vector, rewards) for vector, rewards, _, _ in
            training_rows(policy, args.alias, trace, build_scenario(trace, specs, policy, seed=args.seed))]
    c = ap.contextual
    model = fit_full_information(rows, prior_variance=c.prior_variance, noise_variance=c.noise_variance,
                                 passes=args.passes)
    trained = {"data": str(args.data), "alias": args.alias, "requests": len(rows), "passes": args.passes,
               "deployments": sorted(model.ids)}
    try:
        save_model_file(model, args.out, trained=trained)
    except OSError as exc:
        _err(f"aisia train: cannot write {args.out}: {exc.strerror or exc}")
        return 2
    print(f"trained on {len(rows)} requests ({', '.join(sorted(model.ids))}); model written to {args.out}")
    return 0
