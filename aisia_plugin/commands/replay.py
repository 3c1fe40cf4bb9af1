"""`aisia replay`: replay recorded outcomes through a policy; report quality, cost and latency
against every fixed candidate, uniform random and the per-request oracle.

    aisia replay --policy policies/ --alias auto/coding --data trace.jsonl [--deployments cands.yaml]
    aisia replay ... --compare my-edit/          # the two policies on the same trace, and the deltas
    aisia replay ... --sweep cost_weight=0,0.05,0.1,0.2,0.5 --plot curve.png
    aisia replay --scenario outage [--requests 3000 --providers 11 --seed 0 --scenario-out DIR]

Exit status: 0 done; 1 invalid policy, trace or candidates file (file:line: messages); 2 usage
errors (bad arguments, unknown alias, a file that cannot be read)."""

from __future__ import annotations

import json
import math
import sys

from . import read_input


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
                        "workers); a directory or a glob pattern reads every file it names. An answer that "
                        "quality evidence spoke about after it was served (a conversation signal, a judge's grade, "
                        "feedback) is valued by that evidence")
    p.add_argument("--no-evidence", action="store_true",
                   help="with --logged: value each answer by the reward logged with its outcome only (a success's "
                        "quality estimate then), not by the evidence recorded about it later")
    p.add_argument("--scenario", metavar="NAME",
                   help="instead of --data, a seeded synthetic scenario generated in memory (no data of your own): "
                        "stationary, degrade (the best provider's quality drops, then recovers), outage (it answers "
                        "503 for a tenth of the run), latency_spike, price_change (a good cheap provider costs x10 "
                        "for the second half), prompt_aware (a hidden difficulty the prompt signals)")
    p.add_argument("--requests", type=int, metavar="N", help="with --scenario: requests (default 3000)")
    p.add_argument("--providers", type=int, metavar="K",
                   help="with --scenario: candidates, from 8 to 15 (default 11)")
    p.add_argument("--scenario-out", metavar="DIR",
                   help="with --scenario: also write its trace, meta and candidates files there (nothing is written "
                        "otherwise)")
    p.add_argument("--deployments", metavar="FILE.yaml",
                   help="replay candidates file: provider, prices, tier, specialities, latency model per candidate")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed (strategies, latency models, uniform random, the --scenario generator)")
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


class _Refused(Exception):
    """The command stops: `message` to standard error, exit status `code` (2: usage, 1: input)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def run(args) -> int:
    try:
        return _run(args)
    except _Refused as refused:
        _err(refused.message)
        return refused.code


def _run(args) -> int:
    if args.logged and args.scenario:
        raise _Refused(2, "aisia replay: --logged and --scenario exclude each other")
    if args.logged:
        from .replay_logged import run_logged

        return run_logged(args)
    if args.no_evidence:
        raise _Refused(2, "aisia replay: --no-evidence applies to --logged only (a trace's outcomes carry their grades)")
    if bool(args.data) == bool(args.scenario):
        raise _Refused(2, "aisia replay: give one of --data FILE.jsonl (a trace), --scenario NAME (a synthetic one) "
                          "or --logged FILE.jsonl (a decision log)")
    from ..replay.report import progress_factory
    from ..replay.runner import ReplayError, build_scenario

    sweep_spec = _usage(args)  # usage first: nothing is loaded for a command line that cannot run
    policy, other = _policies(args, sweep_spec)
    deployments_at = event = None
    if args.scenario:
        from ..replay.scenarios import price_event

        trace, specs, event = _scenario(args)
        deployments_at = price_event(event)
    else:
        loaded = _load_data(args, policy)
        if isinstance(loaded, int):
            return loaded
        trace, specs = loaded
    run = _Run(args, policy, build_scenario(trace, specs, policy, seed=args.seed,
                                            seconds_per_request=args.seconds_per_request),
               progress_factory(args.progress or _stderr_is_tty()), deployments_at)
    try:
        if sweep_spec is not None:
            return run.sweep(*sweep_spec)
        if other is not None:
            return run.compare(other)
        return run.single(event)
    except ReplayError as exc:
        raise _Refused(1, f"aisia replay: {exc}") from None


def _usage(args):
    """The parsed --sweep (None without it), once the options are known to fit together."""
    from ..replay.runner import ReplayError, parse_sweep

    if args.plot and not args.sweep:
        raise _Refused(2, "aisia replay: --plot needs --sweep (the curve is drawn from the swept runs)")
    if not math.isfinite(args.seconds_per_request) or args.seconds_per_request <= 0:
        raise _Refused(2, "aisia replay: --seconds-per-request must be a number > 0")
    problem = _scenario_usage(args)
    if problem:
        raise _Refused(2, f"aisia replay: {problem}")
    if not args.sweep:
        return None
    try:
        return parse_sweep(args.sweep)
    except ReplayError as exc:
        raise _Refused(2, f"aisia replay: {exc}") from None


def _policies(args, sweep_spec):
    """(the --policy policy, the --compare one or None), each knowing the alias, the swept
    values applicable to the first."""
    from ..policy import PolicyError, load_policy
    from ..replay.runner import ReplayError, override_alias

    try:
        policy = load_policy(args.policy)
        other = load_policy(args.compare) if args.compare else None
    except PolicyError as exc:
        raise _Refused(1, str(exc)) from None
    for pol, which in ((policy, "--policy"), (other, "--compare")):
        if pol is not None and args.alias not in pol.aliases:
            raise _Refused(2, f"aisia replay: unknown alias {args.alias!r} in the {which} policy; "
                              f"known: {', '.join(pol.aliases)}")
    for v in (sweep_spec[1] if sweep_spec is not None else ()):
        try:
            override_alias(policy, args.alias, sweep_spec[0], v)
        except ReplayError as exc:
            raise _Refused(2, f"aisia replay: --sweep: {exc}") from None
    return policy, other


class _Run:
    """One replay command's run over its scenario: a sweep, a comparison or a single replay,
    printed as text or JSON."""

    def __init__(self, args, policy, scenario, progress, deployments_at):
        self.args, self.policy, self.scenario = args, policy, scenario
        self.progress, self.deployments_at = progress, deployments_at
        self.policy_label = " ".join(args.policy) if args.policy else "(configured policy)"
        self.data_label = args.data or f"scenario {args.scenario}"

    def _replay(self, policy, label: str):
        from ..replay.runner import replay

        return replay(policy, self.args.alias, self.scenario, seed=self.args.seed, progress=self.progress(label),
                      deployments_at=self.deployments_at)

    def sweep(self, param: str, values) -> int:
        from ..replay.report import format_sweep, plot_sweep, sweep_dict
        from ..replay.runner import sweep

        args = self.args
        result = sweep(self.policy, args.alias, self.scenario, param, values, seed=args.seed,
                       progress=lambda i, v: self.progress(f"{param}={v:g}"), deployments_at=self.deployments_at)
        if args.plot:
            try:
                plot_sweep(result, args.plot)
            except ImportError:
                raise _Refused(1, "aisia replay: --plot needs matplotlib (pip install 'aisia_plugin[plot]')") from None
            except (OSError, ValueError) as exc:
                raise _Refused(1, f"aisia replay: cannot write the plot {args.plot}: {exc}") from None
        if args.json:
            extra = {"plot": args.plot} if args.plot else {}
            print(json.dumps(sweep_dict(result, data=self.data_label, **extra), indent=2))
        else:
            print(format_sweep(result))
            if args.plot:
                print(f"\nplot saved to {args.plot}")
        return 0

    def compare(self, other) -> int:
        from ..replay.report import compare_dict, format_compare

        a, b = self._replay(self.policy, "base"), self._replay(other, "other")
        other_label = " ".join(self.args.compare)
        if self.args.json:
            out = {"data": self.data_label, "base_policy": self.policy_label, "other_policy": other_label,
                   **compare_dict(a, b)}
            print(json.dumps(out, indent=2))
        else:
            print(format_compare(a, b, base_label=self.policy_label, other_label=other_label))
        return 0

    def single(self, event) -> int:
        from ..replay.report import format_replay, replay_dict
        from ..replay.scenarios import event_response, format_event_response

        result = self._replay(self.policy, "replay")
        response = event_response(result.choices, event) if event else None
        if self.args.json:
            extra = {"event": {**event, "response": response}} if event else {}
            print(json.dumps(replay_dict(result, data=self.data_label, policy=self.policy_label, **extra), indent=2))
        else:
            print(format_replay(result))
            if event:
                print(format_event_response(event, response))
        return 0


def _scenario_usage(args) -> str:
    """What is wrong with the --scenario options ('' when nothing is)."""
    from ..replay.scenarios import PROMPT_SCENARIOS, PROVIDERS, SCENARIOS

    if not args.scenario:
        given = [f for f, v in (("--scenario-out", args.scenario_out), ("--requests", args.requests),
                                ("--providers", args.providers)) if v is not None]
        return f"{', '.join(given)} only apply with --scenario" if given else ""
    if args.scenario not in SCENARIOS + PROMPT_SCENARIOS:
        return f"unknown scenario {args.scenario!r}; known: {', '.join(SCENARIOS + PROMPT_SCENARIOS)}"
    if args.deployments:
        return "--deployments does not apply with --scenario (its candidates come with it)"
    if args.requests is not None and not 1 <= args.requests <= 1_000_000:
        return "--requests must be from 1 to 1000000"
    if args.providers is not None and not 8 <= args.providers <= len(PROVIDERS):
        return f"--providers must be from 8 to {len(PROVIDERS)}"
    return ""


def _scenario(args):
    """(trace, candidate specs, event) of the synthetic scenario; its files written into
    --scenario-out when given."""
    from pathlib import Path

    from ..replay import scenarios

    records, meta = scenarios.generate_scenario(args.scenario, n=args.requests or scenarios.DEFAULT_REQUESTS,
                                                n_providers=args.providers or scenarios.DEFAULT_PROVIDERS, seed=args.seed)
    ev = meta["event"]
    _err(f"scenario {args.scenario}: {len(records)} requests, {len(meta['providers'])} candidates, seed {args.seed}; "
         + (f"event {ev['kind']} on {ev['candidate']} ({ev['why']}) for requests [{ev['start']}, {ev['end']})"
            if ev else "no event"))
    if args.scenario_out:
        path = scenarios.write_scenario(Path(args.scenario_out), args.scenario, records, meta)
        _err(f"scenario written to {path} (and its .meta.json, .candidates.yaml)")
    return scenarios.scenario_trace(args.scenario, records), scenarios.scenario_specs(meta), ev


def _load_data(args, policy):
    """(trace, candidate specs) from --data and --deployments, or the exit status after the message."""
    from ..replay.candidates import CandidatesError, load_candidates
    from ..replay.trace import TraceError, load_trace

    trace = read_input("replay", load_trace, TraceError, args.data, "the trace")
    if isinstance(trace, int) or not args.deployments:
        return trace if isinstance(trace, int) else (trace, {})
    specs = read_input("replay", lambda p: load_candidates(p, trace_names=trace.candidates, policy=policy),
                       CandidatesError, args.deployments, "the candidates file")
    return specs if isinstance(specs, int) else (trace, specs)
