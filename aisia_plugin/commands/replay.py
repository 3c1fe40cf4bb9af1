"""`aisia replay`: replay recorded outcomes through a policy; report quality, cost and latency
against every fixed candidate, uniform random and the per-request oracle.

    aisia replay --policy policies/ --alias auto/coding --data trace.jsonl [--deployments cands.yaml]
    aisia replay ... --compare my-edit/          # the two policies on the same trace, and the deltas
    aisia replay ... --sweep cost_weight=0,0.05,0.1,0.2,0.5 --plot curve.png

Exit status: 0 done; 1 invalid policy, trace or candidates file (file:line: messages); 2 usage
errors (bad arguments, unknown alias, a file that cannot be read)."""

from __future__ import annotations

import json
import math
import sys


def add_arguments(p):
    p.add_argument("--policy", action="append", metavar="PATH",
                   help="policy file or directory (repeatable; default: the configured policy path)")
    p.add_argument("--alias", default="auto", help="the alias to replay (default: auto)")
    p.add_argument("--data", metavar="FILE.jsonl",
                   help="the trace: JSON Lines, one request a line with each candidate's outcome")
    p.add_argument("--logged", metavar="DECISIONS.jsonl",
                   help="instead of a trace, a decision log (logging.decisions): estimate off-policy what the "
                        "policy's alias would have earned on that traffic (IPS, SNIPS, doubly robust, 95%% intervals); "
                        "--deployments is then the LiteLLM config; with --compare, each policy. The configured "
                        "path also reads the per-worker files beside it (DECISIONS.<pid>.jsonl, several proxy "
                        "workers); a directory or a glob pattern reads every file it names")
    p.add_argument("--deployments", metavar="FILE.yaml",
                   help="replay candidates file: provider, prices, tier, specialities, latency model per candidate")
    p.add_argument("--seed", type=int, default=0, help="random seed (strategies, latency models, uniform random)")
    p.add_argument("--seconds-per-request", type=float, default=1.0, metavar="S",
                   help="simulated time between requests (default 1.0: a 60 s breaker timeout lasts 60 requests)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--compare", action="append", metavar="OTHER_POLICY",
                      help="also replay this policy (file or directory, repeatable) and print the differences")
    mode.add_argument("--sweep", metavar="PARAM=V1,V2,...",
                      help="re-run with one alias parameter overridden, e.g. cost_weight=0,0.05,0.1,0.2,0.5")
    p.add_argument("--plot", metavar="FILE.png", help="with --sweep: save the quality-cost curve (matplotlib)")
    p.add_argument("--progress", action="store_true", help="show a progress bar on stderr even when it is not a terminal")


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def run(args) -> int:
    if args.logged:
        from .replay_logged import run_logged

        return run_logged(args)
    if not args.data:
        _err("aisia replay: --data FILE.jsonl (a trace) or --logged FILE.jsonl (a decision log) is required")
        return 2
    from ..policy import PolicyError, load_policy
    from ..replay.candidates import CandidatesError, load_candidates
    from ..replay.report import (compare_dict, format_compare, format_replay, format_sweep, plot_sweep, progress_factory,
                                 replay_dict, sweep_dict)
    from ..replay.runner import ReplayError, build_scenario, parse_sweep, replay, sweep
    from ..replay.trace import TraceError, load_trace

    # Usage first: nothing is loaded for a command line that cannot run.
    if args.plot and not args.sweep:
        _err("aisia replay: --plot needs --sweep (the curve is drawn from the swept runs)")
        return 2
    if not math.isfinite(args.seconds_per_request) or args.seconds_per_request <= 0:
        _err("aisia replay: --seconds-per-request must be a number > 0")
        return 2
    sweep_spec = None
    if args.sweep:
        try:
            sweep_spec = parse_sweep(args.sweep)
        except ReplayError as exc:
            _err(f"aisia replay: {exc}")
            return 2

    try:
        policy = load_policy(args.policy)
        other = load_policy(args.compare) if args.compare else None
    except PolicyError as exc:
        _err(str(exc))
        return 1
    for pol, which in ((policy, "--policy"), (other, "--compare")):
        if pol is not None and args.alias not in pol.aliases:
            _err(f"aisia replay: unknown alias {args.alias!r} in the {which} policy; known: {', '.join(pol.aliases)}")
            return 2

    if sweep_spec is not None:
        from ..replay.runner import override_alias

        for v in sweep_spec[1]:
            try:
                override_alias(policy, args.alias, sweep_spec[0], v)
            except ReplayError as exc:
                _err(f"aisia replay: --sweep: {exc}")
                return 2

    try:
        trace = load_trace(args.data)
    except TraceError as exc:
        _err(str(exc))
        return 1
    except OSError as exc:
        _err(f"aisia replay: cannot read the trace {args.data}: {exc.strerror or exc}")
        return 2
    specs = {}
    if args.deployments:
        try:
            specs = load_candidates(args.deployments, trace_names=trace.candidates, policy=policy)
        except CandidatesError as exc:
            _err(str(exc))
            return 1
        except (OSError, UnicodeDecodeError) as exc:
            _err(f"aisia replay: cannot read the candidates file {args.deployments}: {getattr(exc, 'strerror', None) or exc}")
            return 2

    scenario = build_scenario(trace, specs, policy, seed=args.seed, seconds_per_request=args.seconds_per_request)
    progress = progress_factory(args.progress or _stderr_is_tty())
    policy_label = " ".join(args.policy) if args.policy else "(configured policy)"
    try:
        if sweep_spec is not None:
            param, values = sweep_spec
            result = sweep(policy, args.alias, scenario, param, values, seed=args.seed,
                           progress=lambda i, v: progress(f"{param}={v:g}"))
            if args.plot:
                try:
                    plot_sweep(result, args.plot)
                except ImportError:
                    _err("aisia replay: --plot needs matplotlib (pip install 'aisia_plugin[plot]')")
                    return 1
                except (OSError, ValueError) as exc:
                    _err(f"aisia replay: cannot write the plot {args.plot}: {exc}")
                    return 1
            if args.json:
                extra = {"plot": args.plot} if args.plot else {}
                print(json.dumps(sweep_dict(result, data=args.data, **extra), indent=2))
            else:
                print(format_sweep(result))
                if args.plot:
                    print(f"\nplot saved to {args.plot}")
            return 0
        if other is not None:
            a = replay(policy, args.alias, scenario, seed=args.seed, progress=progress("base"))
            b = replay(other, args.alias, scenario, seed=args.seed, progress=progress("other"))
            other_label = " ".join(args.compare)
            if args.json:
                out = compare_dict(a, b)
                out = {"data": args.data, "base_policy": policy_label, "other_policy": other_label, **out}
                print(json.dumps(out, indent=2))
            else:
                print(format_compare(a, b, base_label=policy_label, other_label=other_label))
            return 0
        result = replay(policy, args.alias, scenario, seed=args.seed, progress=progress("replay"))
    except ReplayError as exc:
        _err(f"aisia replay: {exc}")
        return 1
    if args.json:
        print(json.dumps(replay_dict(result, data=args.data, policy=policy_label), indent=2))
    else:
        print(format_replay(result))
    return 0
