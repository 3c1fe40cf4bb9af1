"""`aisia replay --logged DECISIONS.jsonl`: off-policy evaluation of a policy's alias on the
traffic a decision log recorded (aisia_plugin/replay/offpolicy.py), for "what does my policy
edit do on last week's traffic". As in trace mode, the --compare paths together are the other
policy (files or directories layered as --policy's are, each value possibly several paths joined by
os.pathsep, as in $AISIA_POLICY: `--compare team.yaml:my-edit.yaml` is team.yaml with an edit that
says `overrides: true`). Exit status as `aisia replay`: 0 done, 1 invalid policy, log or
deployments file, 2 usage or I/O errors."""

from __future__ import annotations

import json
import math
import os
import sys


def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def _fmt(e: dict) -> str:
    lo, hi = e["ci95"]
    if not all(math.isfinite(x) for x in (e["value"], lo, hi)):
        return "n/a"
    return f"{e['value']:.4f}  [{lo:.4f}, {hi:.4f}]"


def _percent(x: float) -> str:
    return f"{x:.0%}" if math.isfinite(x) else "n/a"


def _number(x: float) -> str:
    return f"{x:.0f}" if math.isfinite(x) else "n/a"


def _paths(values) -> list[str]:
    """--policy / --compare values, each possibly several paths joined by os.pathsep."""
    return [part for v in values or () for part in str(v).split(os.pathsep) if part]


def _logged_deployments(events) -> list:
    """The logged candidates, each at the price the proxy gave it (logged with each decision:
    LiteLLM's prices first), the latest logged; a log written before prices were logged leaves
    a candidate at the default price, which is said once."""
    from ..decision import Deployment

    prices: dict = {}
    for e in events:
        prices.update(e.prices)
    ids = sorted({c for e in events for c in e.candidates})
    unpriced = [i for i in ids if i not in prices]
    if unpriced:
        _err(f"aisia replay: the log gives no price for {', '.join(unpriced)} (logged before prices were): "
             "--deployments CONFIG prices them as the proxy does")
    return [Deployment(id=i, model_name=i, model=i, provider=i.split("/")[0],
                       **({"input_cost_per_1m": prices[i][0], "output_cost_per_1m": prices[i][1],
                           "price_source": "the decision log (the proxy's price)"} if i in prices else {}))
            for i in ids]


def run_logged(args) -> int:
    from ..deployments import DeploymentError, read_config_file
    from ..litellm.costs import proxy_deployments
    from ..policy import PolicyError, load_policy
    from ..replay.offpolicy import LogError, engine_target, evaluate, read_logs

    for flag in ("sweep", "plot"):
        if getattr(args, flag, None):
            _err(f"aisia replay: --{flag} does not apply to --logged")
            return 2
    use_evidence = not getattr(args, "no_evidence", False)
    base_paths = _paths(args.policy)
    labels = {"policy": " ".join(base_paths) if base_paths else "(the configured policy)"}
    try:
        policies = [("policy", load_policy(base_paths or None))]
        if args.compare:
            compare_paths = _paths(args.compare)
            labels["compare"] = " ".join(compare_paths)
            policies.append(("compare", load_policy(compare_paths)))
    except PolicyError as exc:
        _err(str(exc))
        return 1
    for name, pol in policies:
        if args.alias not in pol.aliases:
            _err(f"aisia replay: unknown alias {args.alias!r} in --{name} {labels[name]}; "
                 f"known: {', '.join(pol.aliases)}")
            return 2
    from ..decision_log import logged_files, strict_json

    # The configured path stands for every worker's file too (decisions.<pid>.jsonl beside it).
    files = logged_files(args.logged) or [args.logged]
    try:
        texts = []
        for name in files:
            with open(name, encoding="utf-8") as fh:
                texts.append((name, fh.read().splitlines()))
        # One log: evidence a worker wrote about another worker's answer is joined to it.
        events = read_logs(texts, evidence=use_evidence)
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
                # Priced as the proxy prices them (LiteLLM's prices first), so that a cost-aware
                # policy chooses here as it would have chosen in the proxy.
                deps = proxy_deployments(read_config_file(args.deployments), pol)
            except DeploymentError as exc:
                _err(str(exc))
                return 1
            except (OSError, UnicodeDecodeError) as exc:
                _err(f"aisia replay: cannot read {args.deployments}: {getattr(exc, 'strerror', None) or exc}")
                return 2
        else:
            deps = _logged_deployments(events)
        results[name] = evaluate(events, engine_target(pol, deps, alias=args.alias, seed=args.seed))
    if args.json:
        if len(results) == 1:
            out = {"alias": args.alias, "log": args.logged, **results["policy"]}
        else:
            out = {"alias": args.alias, "log": args.logged, "policies": results,
                   "paths": {name: labels[name] for name in results}}
        print(json.dumps(strict_json(out), indent=1))
        return 0
    first = results["policy"]
    print(f"off-policy estimates for {args.alias} on {args.logged}: {first['events']} logged attempts with an outcome "
          f"({first['skipped_no_propensity']} without a selection probability skipped; "
          f"{first['valued_by_evidence']} answers valued by the evidence recorded about them later: signals, judge, "
          f"feedback{'' if use_evidence else ' (not read: --no-evidence)'}); mean reward, 95 % interval")
    print(f"  {'logged policy (observed)':<28}  {_fmt(first['logged'])}")
    for name, r in results.items():
        print(f"\n--{name} {labels[name]}: gives the logged choice a positive probability in "
              f"{_percent(r['agreement'])} of them, "
              f"effective sample size {_number(r['effective_sample_size'])}")
        for key, label in (("ips", "inverse propensity"), ("snips", "self-normalised IPS"), ("dr", "doubly robust")):
            print(f"  {label:<28}  {_fmt(r[key])}")
    return 0
