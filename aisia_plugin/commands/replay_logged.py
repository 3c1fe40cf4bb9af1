"""`aisia replay --logged DECISIONS.jsonl`: off-policy evaluation of a policy's alias on the
traffic a decision log recorded (aisia_plugin/replay/offpolicy.py), for "what does my policy
edit do on last week's traffic". Exit status as `aisia replay`: 0 done, 1 invalid policy, log or
deployments file, 2 usage or I/O errors."""

from __future__ import annotations

import json
import math
import sys


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def _fmt(e: dict) -> str:
    lo, hi = e["ci95"]
    if not all(math.isfinite(x) for x in (e["value"], lo, hi)):
        return "n/a"
    return f"{e['value']:.4f}  [{lo:.4f}, {hi:.4f}]"


def run_logged(args) -> int:
    from ..deployments import DeploymentError, load_deployments_file
    from ..policy import PolicyError, load_policy
    from ..replay.offpolicy import LogError, engine_target, evaluate, read_log

    for flag in ("sweep", "plot"):
        if getattr(args, flag, None):
            _err(f"aisia replay: --{flag} does not apply to --logged")
            return 2
    try:
        policies = [("policy", load_policy(args.policy))]
        for path in args.compare or ():
            policies.append((path, load_policy([path])))
    except PolicyError as exc:
        _err(str(exc))
        return 1
    for name, pol in policies:
        if args.alias not in pol.aliases:
            _err(f"aisia replay: unknown alias {args.alias!r} in {name}; known: {', '.join(pol.aliases)}")
            return 2
    try:
        with open(args.logged, encoding="utf-8") as fh:
            events = read_log(fh, args.logged)
    except LogError as exc:
        _err(str(exc))
        return 1
    except (OSError, UnicodeDecodeError) as exc:
        _err(f"aisia replay: cannot read the decision log {args.logged}: {getattr(exc, 'strerror', None) or exc}")
        return 2
    if not events:
        _err(f"aisia replay: {args.logged} holds no decision with a known outcome and reward")
        return 1
    results = {}
    for name, pol in policies:
        if args.deployments:
            try:
                deps = load_deployments_file(args.deployments, pol)
            except DeploymentError as exc:
                _err(str(exc))
                return 1
            except (OSError, UnicodeDecodeError) as exc:
                _err(f"aisia replay: cannot read {args.deployments}: {getattr(exc, 'strerror', None) or exc}")
                return 2
        else:
            from ..decision import Deployment

            ids = sorted({c for e in events for c in e.candidates})
            deps = [Deployment(id=i, model_name=i, model=i, provider=i.split("/")[0]) for i in ids]
        results[name] = evaluate(events, engine_target(pol, deps, alias=args.alias, seed=args.seed))
    if args.json:
        out = results["policy"] if len(results) == 1 else results
        print(json.dumps({"alias": args.alias, "log": args.logged, **out} if len(results) == 1 else
                         {"alias": args.alias, "log": args.logged, "policies": out}, indent=1))
        return 0
    print(f"off-policy estimates for {args.alias} on {args.logged}")
    for name, r in results.items():
        print(f"\n{name}: {r['events']} logged attempts ({r['skipped_no_propensity']} without a selection probability "
              f"skipped), the policy agrees with the logged choice on {r['agreement']:.0%}, effective sample size "
              f"{r['effective_sample_size']:.0f}")
        print(f"  logged policy's mean reward   {_fmt(r['logged'])}")
        for key, label in (("ips", "inverse propensity"), ("snips", "self-normalised IPS"), ("dr", "doubly robust")):
            print(f"  {label:<28}  {_fmt(r[key])}")
    return 0
