"""`aisia explain`: how one prompt would be routed, and why.

Exit status: 0 a deployment was chosen, 1 an invalid policy or deployments file, 2 usage or I/O
error, 3 the decision is a refusal (a strict budget, no candidate): a script can tell a policy
that routes this prompt nowhere."""

from __future__ import annotations

import json
import math
import sys

from ..capabilities import ordered, request_needs
from . import read_input


def add_arguments(p):
    p.add_argument("prompt", nargs="?", help="the user prompt (use - to read it from standard input)")
    p.add_argument("--request", metavar="FILE", help="a chat completions request body (JSON) to route instead of a "
                   "prompt: its messages, tools, response_format and reasoning parameters (what it needs: "
                   "docs/capabilities.md)")
    p.add_argument("--alias", default="auto", help="the alias to route for (default: auto)")
    p.add_argument("--policy", action="append", metavar="PATH", help="policy file or directory (repeatable; default: the configured policy path)")
    p.add_argument("--deployments", metavar="FILE", help="LiteLLM config (model_list) or replay candidates file; default: a demo pool")
    p.add_argument("--state", metavar="FILE", help="learned state (JSON from a store dump) to decide on")
    from . import live

    live.add_arguments(p)  # --url: decide on the running proxy's live state instead of --state
    p.add_argument("--team", metavar="NAME", help="decide as a key of this LiteLLM team (its id or its alias) would: "
                   "the policy's teams.<NAME> layer applies (docs/teams.md)")
    p.add_argument("--key-metadata", metavar="JSON", help="the key's LiteLLM metadata, e.g. '{\"aisia_policy\": \"premium\"}': "
                   "a named layer it selects replaces the team's; a 'models' list restricts the deployments")
    p.add_argument("--min-tier", help="the request's x-aisia-min-tier")
    p.add_argument("--max-cost-usd", help="the request's x-aisia-max-cost-usd")
    p.add_argument("--seed", type=int, default=0, help="random seed for strategies that sample")
    p.add_argument("--json", action="store_true", help="print one JSON object")


# A demo pool (names follow the seed's provider-prefix rule), used when no deployments are given.
DEMO_POOL = [
    {"model_name": "cerebras-llama-3.3-70b", "litellm_params": {"model": "cerebras/llama-3.3-70b"}, "model_info": {"id": "cerebras-llama-3.3-70b"}},
    {"model_name": "groq-llama-3.1-8b", "litellm_params": {"model": "groq/llama-3.1-8b-instant"}, "model_info": {"id": "groq-llama-3.1-8b"}},
    {"model_name": "deepseek-coder", "litellm_params": {"model": "deepseek/deepseek-coder"}, "model_info": {"id": "deepseek-coder"}},
    {"model_name": "openai-gpt-4o", "litellm_params": {"model": "openai/gpt-4o"}, "model_info": {"id": "openai-gpt-4o"}},
    {"model_name": "openai-gpt-4o-mini", "litellm_params": {"model": "openai/gpt-4o-mini"}, "model_info": {"id": "openai-gpt-4o-mini"}},
    {"model_name": "anthropic-claude-sonnet", "litellm_params": {"model": "anthropic/claude-3-5-sonnet"}, "model_info": {"id": "anthropic-claude-sonnet"}},
    {"model_name": "ollama-llama3", "litellm_params": {"model": "ollama/llama3"}, "model_info": {"id": "ollama-llama3"}},
]


def _load_deployments(path, policy):
    """The deployments to decide among, built and priced as the proxy builds them (LiteLLM's
    pricing included, so that the choice is the proxy's): a LiteLLM config's model_list (every
    error located, as `aisia validate --deployments` reports it), the demo pool, or a replay
    candidates file (priced by its own fields and the policy)."""
    from ..deployments import build_deployments, read_config_file

    if path is None:
        from ..litellm.costs import config_price_lookup

        # The demo's local model is inferred local (ollama/), so auto/offline has a candidate.
        return build_deployments(DEMO_POOL, policy, config_price_lookup(DEMO_POOL))
    import yaml

    with open(path, encoding="utf-8") as fh:
        head = fh.read(1 << 20)
    try:
        data = yaml.safe_load(head) if "candidates:" in head and "model_list:" not in head else None
    except yaml.YAMLError:
        data = None
    if isinstance(data, dict) and "candidates" in data:
        from ..replay.candidates import load_candidates

        specs = load_candidates(path, policy=policy)
        return [spec.to_deployment(name, policy) for name, spec in specs.items()]
    from ..litellm.costs import proxy_deployments

    return proxy_deployments(read_config_file(path), policy)


EXIT_REFUSED = 3


def _store(args, deployment_ids):
    """The state to decide on: the running proxy's (--url), a state file's (--state), or an empty
    one; an exit status after its message when it cannot be read."""
    from ..state.memory import MemoryState
    from . import live

    # A value read otherwise than stored (clamped, or replaced by its default) is named.
    def warn(m):
        print(f"aisia explain: warning: {m}", file=sys.stderr)

    if args.url and args.state:
        print("aisia explain: give --url (a running proxy) or --state (a file), not both", file=sys.stderr)
        return 2
    try:
        if args.url:
            data = live.fetch(args.url, args.key, live.STATE_QUERY)
            notes: list = []
            store = MemoryState.load(data, deployment_ids, notes)
            for note in notes:
                warn(f"{args.url}: {note}")
            return store
        return MemoryState.load_file(args.state, deployment_ids, warn=warn) if args.state else MemoryState()
    except (OSError, ValueError, live.LiveError) as exc:
        print(f"aisia explain: {exc}", file=sys.stderr)
        return 2


def _read_stdin() -> str:
    """The prompt from standard input, whatever the locale: bytes that are not UTF-8 become
    U+FFFD (a prompt is routed on its words; a byte the terminal mangled cannot change that)."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream (a test's StringIO)
        return sys.stdin.read()
    return stream.read().decode("utf-8", errors="replace")


def _request_body(args):
    """The request to route: {"messages": [the prompt]}, or the --request file's JSON body; an
    exit status after its message when neither or both are given, or the file is no such body."""
    if (args.prompt is None) == (args.request is None):
        print("aisia explain: give a prompt or --request FILE (one of them)", file=sys.stderr)
        return 2
    if args.request is None:
        prompt = _read_stdin() if args.prompt == "-" else args.prompt
        return {"messages": [{"role": "user", "content": prompt}]}
    try:
        with open(args.request, encoding="utf-8") as fh:
            body = json.load(fh)
    except (OSError, ValueError) as exc:
        print(f"aisia explain: cannot read the request {args.request}: {getattr(exc, 'strerror', None) or exc}",
              file=sys.stderr)
        return 2
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        print(f"aisia explain: {args.request}: a request body must be a JSON object with a 'messages' list",
              file=sys.stderr)
        return 2
    return body


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.4f}"
    return str(v)


def run(args) -> int:
    from ..engine import Engine, UnknownAlias
    from ..policy import PolicyError, load_policy_with_locations

    try:
        loaded = load_policy_with_locations(args.policy)
    except PolicyError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    scope = _scope(args, loaded)
    if isinstance(scope, int):
        return scope
    operator, (ref, policy, limits, models) = loaded.policy, scope
    if args.alias not in policy.aliases:
        print(f"aisia explain: unknown alias {args.alias!r}; known: {', '.join(policy.aliases)}", file=sys.stderr)
        return 2
    body = _request_body(args)
    if isinstance(body, int):
        return body
    from ..deployments import DeploymentError
    from ..replay.candidates import CandidatesError

    # An invalid LiteLLM config or candidates file: 1, its located problems; unreadable: 2.
    deployments = read_input("explain", lambda path: _load_deployments(path, policy), (DeploymentError, CandidatesError),
                             args.deployments, "the deployments file")
    if isinstance(deployments, int):
        return deployments
    from ..policy.layers import left_out

    operator_view = deployments if ref is None else _load_deployments(args.deployments, operator)
    exclude = left_out(args.alias, ref, operator.aliases.get(args.alias), operator_view, deployments, models,
                       limits.min_tier)
    store = _store(args, [d.id for d in deployments])
    if isinstance(store, int):
        return store
    import random
    import time

    # On a live proxy's state its breakers' times are the wall clock's.
    engine = Engine(policy, clock=time.time if args.url else (lambda: 0.0), rng=random.Random(args.seed), store=store)
    messages, tools = body.get("messages"), body.get("tools")

    feats = engine.features(messages, tools).replace(estimate_probability=True)
    try:
        decision = engine.decide(args.alias, messages, deployments, tools=tools, features=feats, reserve=False,
                                 request=body, exclude=exclude, max_cost_usd=limits.max_cost_usd)
    except UnknownAlias:
        return 2
    features = {k: v for k, v in feats.as_dict().items() if k not in ("text", "extra", "estimate_probability")}
    features["needs"] = ",".join(ordered(request_needs(feats, messages, tools, body))) or "-"
    from ..deployments import describe

    if args.json:
        out = {"alias": args.alias, "layer": ref.label if ref else None, "features": features, "decision": decision.as_dict(),
               "deployments": [describe(d) for d in deployments]}
        # Infinite scores (UCB1's untried candidates) become null: JSON has no infinity.
        print(json.dumps(_jsonable(out), indent=2))
        return EXIT_REFUSED if decision.refused else 0
    return _print_text(args, operator, policy, ref, features, decision, deployments)


def _print_text(args, operator, policy, ref, features: dict, decision, deployments) -> int:
    """The decision as text: the alias and its layer, the features, each deployment's price,
    locality and capabilities, each candidate's score or why it was left out, the choice."""
    print(f"alias:     {args.alias}  ({policy.aliases[args.alias].description})")
    if ref is not None:
        print(f"layer:     {ref.label} over the operator's policy ({getattr(operator, ref.section)[ref.name].description or '-'})")
    print("features:  " + ", ".join(f"{k}={v}" for k, v in features.items()))
    print(f"domain:    {decision.domain or '-'}   task type: {decision.task_type}")
    print(f"strategy:  {decision.strategy}")
    forgetting = policy.bandit.forgetting
    if forgetting.enabled:
        print(f"learning:  forgetting on (half-life {forgetting.half_life_requests:g} requests): counts such as "
              "UCB1's n and N are discounted by their age")
    print("deployments:")
    for d in deployments:
        where = "local" if d.local else "remote"
        print(f"    {d.id:32s} ${d.input_cost_per_1m:g}/${d.output_cost_per_1m:g} per 1M in/out: {d.price_source}; "
              f"{where}: {d.local_reason}")
        if d.capabilities:
            print(" " * 37 + "takes: " + ", ".join(
                f"{n} {'yes' if d.capabilities[n] else 'no'}" for n in ordered(d.capabilities)))
    print("candidates:")
    for s in decision.scores:
        if s.excluded:
            print(f"  - {s.id:32s} excluded: {s.excluded}")
        else:
            mark = "*" if s.id == decision.deployment_id else " "
            terms = " ".join(f"{k}={_fmt(v)}" for k, v in s.terms.items())
            print(f"  {mark} {s.id:32s} score={_fmt(s.score)}  {terms}")
    if decision.refused:
        print(f"decision:  refused ({decision.refused}, HTTP {decision.status_code}): {decision.reason}")
        return EXIT_REFUSED
    else:
        prob = f", selection probability {decision.probability:.2f}" if decision.probability is not None else ""
        print(f"decision:  {decision.deployment_id} -> model {decision.model} (score {_fmt(decision.final_score)}{prob})")
        print(f"reason:    {decision.reason}")
    return 0


def _scope(args, loaded):
    """(the layer, its policy, the request's limits, the key's models) of --team, --key-metadata,
    --min-tier and --max-cost-usd, as the proxy reads them (litellm/tenancy.py); an exit status
    after its message when one cannot be read."""
    from ..litellm.tenancy import LimitProblem, request_limits
    from ..policy.layers import layer_for

    try:
        meta = json.loads(args.key_metadata) if args.key_metadata else {}
    except ValueError as exc:
        meta = exc
    if not isinstance(meta, dict):
        print(f"aisia explain: --key-metadata must be a JSON object ({meta})", file=sys.stderr)
        return 2
    headers = {k: v for k, v in (("x-aisia-min-tier", args.min_tier), ("x-aisia-max-cost-usd", args.max_cost_usd))
               if v is not None}
    limits = request_limits({"proxy_server_request": {"headers": headers}})
    if isinstance(limits, LimitProblem):
        print(f"aisia explain: {limits.message}", file=sys.stderr)
        return 2
    key_layer = meta.get("aisia_policy")
    ref = layer_for(loaded.layers, args.team, args.team, key_layer)
    if ref is None and key_layer:
        print(f"aisia explain: the key's aisia_policy {key_layer!r} names no layer of the policy "
              f"(declared: {', '.join(sorted(r.name for r in loaded.layers if r.section == 'layers')) or 'none'})",
              file=sys.stderr)
        return 2
    models = [m for m in meta.get("models") or () if isinstance(m, str)]
    return ref, loaded.layers[ref] if ref is not None else loaded.policy, limits, models


def _jsonable(o):
    if isinstance(o, float):
        return None if not math.isfinite(o) else o
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    return o
