"""Decision overhead: the cost of one full aisia routing decision vs. LiteLLM's own selection.

    .venv/bin/python benchmarks/decision_overhead.py [--calls 3000] [--sizes 4,16,64]

* ours: ``Engine.decide(alias, messages, deployments)`` (features and domain in one RE2 pass,
  candidates, breakers, budget, arm views, the strategy, the Decision, the observe hook) for the
  aliases below over pools of 4/16/64 deployments, a 2 KB prompt, state warmed by ~200 outcomes;
  four modes per alias (``decide_steps``), every (alias, mode) cell of a pool size timed in six
  interleaved turns (bench.interleaved). pieces: the same steps called alone, and Engine.record().
* litellm: ``LiteLLMBaseline.choose`` for its three strategies over the same pools, warmed with the
  same outcomes, and ``router_only``: the Router call alone, without the baseline's harness.

Each call timed alone (perf_counter_ns) after an untimed warm-up, gc off during the loops.
Writes benchmarks/results/overhead.json and .md.

``--hostile [--repeats 5]``: only linear time on hostile inputs, the cost of one decision as the
request grows (prompt bytes, message count, tool-list size, NUL bytes, invalid Unicode, nesting), so
that a megabyte prompt or tens of thousands of messages cost time in proportion to their size, up
to the scan cap (domains.max_scan_chars), and never more. Each figure is the median of
``--repeats`` decisions of a fresh request object (the engine warm); asserts nothing. Writes
benchmarks/results/hostile_inputs.json and .md."""

from __future__ import annotations

import functools
import itertools
import random
import statistics
import sys
import time
import traceback
import types

import bench
from litellm_baselines import MODEL_GROUP, STRATEGIES as LITELLM_STRATEGIES, LiteLLMBaseline

from aisia_plugin import plugins
from aisia_plugin.bandit import arm_weights
from aisia_plugin.decision import Deployment, Pool
from aisia_plugin.engine import Engine
from aisia_plugin.features import extract_features
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy
from aisia_plugin.replay.scenarios import SEED_PRICES

# (provider, USD per 1M input tokens, base latency s): the seed's price table (SEED_PRICES), output at 3x.
PROVIDERS = [(prov, SEED_PRICES[prov], lat) for prov, lat in (
    ("cerebras", 0.35), ("groq", 0.45), ("deepseek", 2.2), ("openai", 1.4), ("anthropic", 1.8), ("mistral", 1.1),
    ("gemini", 1.0), ("together", 1.3), ("fireworks", 0.9), ("cohere", 1.5), ("deepinfra", 1.6), ("perplexity", 1.7))]
ALIASES = [("auto", "ucb1"), ("auto/smart", "thompson"), ("auto/cheap", "cost"), ("auto/fast", "latency"),
           ("auto/lkgp", "lkgp"), ("auto/contextual", "contextual")]
WARM_OUTCOMES = 200
WARM_CALLS = 200  # untimed calls before each timing loop
TARGET_N = 16
TARGET_P50_US, TARGET_P99_US = 50.0, 200.0
# Issue 20: p50 at n=16 as a ratio to LiteLLM's simple-shuffle choose() in the same run, in these modes.
RATIO_TARGET, RATIO_MODES = 0.5, ("real_prompts", "steady", "unseen")
SYSTEM = [{"role": "system", "content": "You are a helpful assistant."}]


def padded_requests(texts: list[str], step: int = 1, limit: int | None = None) -> list[list[dict]]:
    """Distinct real 2 KB requests: the texts (every ``step``-th, at most ``limit``) behind the
    system line, each padded with the texts after it."""
    return [SYSTEM + [{"role": "user", "content": t}]
            for t in bench.padded(texts, 2048 - len(SYSTEM[0]["content"]), step, limit)]


def real_prompts(limit: int = 400) -> list[list[dict]]:
    """RouterArena's prompts, spread over the file (it is grouped by dataset): [] without the data."""
    files = sorted(bench.shared_data_dir().glob("routerarena_*.jsonl"))
    prompts = [p for r in (bench.read_jsonl(files[0]) if files else ())
               if isinstance(p := r.get("prompt") or r.get("question") or "", str) and p.strip()]
    return padded_requests(prompts, max(1, len(prompts) // limit), limit)


def decide_ns(decide, alias: str, messages, deps, explain: bool = False, after=None) -> int:
    """The nanoseconds of one ``decide(alias, messages, deps)`` (and ``Decision.as_dict()`` when
    ``explain``); ``after(decision)`` runs untimed."""
    t0 = time.perf_counter_ns()
    d = decide(alias, messages, deps)
    if explain:
        d.as_dict()
    t1 = time.perf_counter_ns()
    if after:
        after(d)
    return t1 - t0


def time_unseen(eng, aliases, deps, per_alias: int = 200) -> dict:
    """Each alias decides ``per_alias`` GSM8K prompts padded to 2 KB, text this process has never
    scanned (disjoint slices), once each: the cost a freshly started proxy pays on new text (RE2's
    lazy DFAs meet it for the first time)."""
    path = bench.shared_data_dir() / "routellm_gsm8k_responses.csv"
    prompts = padded_requests([row["prompt"] for row in bench.read_csv(path) if row.get("prompt", "").strip()]
                              if path.exists() else [])
    out = {}
    for k, alias in enumerate(aliases):
        chunk = prompts[k * per_alias:(k + 1) * per_alias]
        if len(chunk) < per_alias:
            break
        with bench.gc_off():
            out[alias] = bench.summarize([decide_ns(eng.decide, alias, msgs, deps) for msgs in chunk])
    return out


def pool_specs(n: int) -> list[dict]:
    return [{"id": f"{prov}-model-{i}", "provider": prov, "model": f"{prov}/model-{i}", "input_cost_per_1m": price,
             "output_cost_per_1m": round(price * 3, 4), "latency_s": lat * (1 + 0.05 * (i // len(PROVIDERS)))}
            for i, (prov, price, lat) in ((i, PROVIDERS[i % len(PROVIDERS)]) for i in range(n))]


def build_engine(specs: list[dict], policy):
    clock = types.SimpleNamespace(t=1_000.0)  # the engine's clock, moved by hand
    eng = Engine(policy, clock=lambda: clock.t, rng=random.Random(1))
    deps = [Deployment(id=s["id"], model_name="bench-pool", model=s["model"], provider=s["provider"],
                       input_cost_per_1m=s["input_cost_per_1m"], output_cost_per_1m=s["output_cost_per_1m"])
            for s in specs]
    return eng, clock, deps


def outcome(r: random.Random, dep: str, latency_s: float) -> Outcome:
    """A simulated outcome: 3 % provider failures (503), latency 0.7..1.5 x the deployment's, quality 0.3..1."""
    ok = r.random() > 0.03
    return Outcome(dep, success=ok, latency_s=latency_s * r.uniform(0.7, 1.5), status_code=None if ok else 503,
                   quality=r.uniform(0.3, 1.0) if ok else None)


def warm_engine(eng, clock, deps, specs, messages, aliases: list[str]) -> None:
    """WARM_OUTCOMES outcomes: every deployment tried, then routed by the aliases (some rewards
    below 0.5, so the Beta posteriors have both shapes above 1, as in a serving proxy)."""
    r, lat = random.Random(7), {s["id"]: s["latency_s"] for s in specs}
    for i in range(WARM_OUTCOMES):
        clock.t += 0.5
        d = eng.decide(aliases[i % len(aliases)], messages, deps)
        dep = deps[i].id if i < len(deps) else d.deployment_id  # each arm pulled at least once
        eng.record(d, outcome(r, dep, lat[dep]))


def decide_steps(eng, clock, alias: str, messages, prompts, deps, specs) -> dict:
    """One alias's timed steps: ``fixed`` (the dense prompt, state frozen), ``explained`` (plus
    ``Decision.as_dict()``), ``real_prompts`` (a different real prompt each call) and ``steady``
    (real prompts, each decision followed by a recorded outcome, untimed, as in a serving proxy)."""
    decide = eng.decide
    steps = {"fixed": lambda: decide_ns(decide, alias, messages, deps),
             "explained": lambda: decide_ns(decide, alias, messages, deps, explain=True)}
    if prompts:
        it = itertools.cycle(prompts)
        steps["real_prompts"] = lambda: decide_ns(decide, alias, next(it), deps)
    r, lat, it2 = random.Random(11), {sp["id"]: sp["latency_s"] for sp in specs}, itertools.cycle(prompts or [messages])

    def steady():
        clock.t += 0.05
        return decide_ns(decide, alias, next(it2), deps,
                         after=lambda d: eng.record(d, outcome(r, d.deployment_id, lat[d.deployment_id])))

    steps["steady"] = steady
    return steps


def capture_select_inputs(eng, strategy_name: str, alias: str, messages, deps):
    """The strategy, and the exact (pool, context) the engine hands it for one decide()."""
    strat, captured = plugins.get_strategy(strategy_name), []
    real = strat.select
    strat.select = lambda pool, ctx: captured.append((pool, ctx)) or real(pool, ctx)  # shadows the method
    try:
        eng.decide(alias, messages, deps)
    finally:
        del strat.select
    return strat, captured[0]


def unread_copy(pool):
    """A Pool with the same inputs and none of its columns computed: a strategy timed on it pays for
    every column it reads, as in a decision (a Pool keeps what it computed)."""
    return Pool(pool.deployments, pool.breakers, pool.task_fit, pool._globals, pool._domains, *pool._arm_at)


def pieces(eng, clock, deps, policy, usable, messages, specs, calls) -> dict:
    """The decision's steps called separately with the same inputs, and record() for reference."""
    tc, pc = bench.time_calls, {}
    max_chars = policy.domains.max_scan_chars
    pc["extract_features"] = tc(lambda: extract_features(messages, None, None, max_chars=max_chars), calls)
    pc["engine.features (one scan: features + domains present, incl. hook)"] = tc(
        lambda: eng._scan(messages, None, None), calls)
    feats, present = eng._scan(messages, None, None)
    pc["detect_domain (alone: its own scans)"] = tc(lambda: eng.detector.detect(feats.text), calls)
    pc["detect_domain (domains present known)"] = tc(lambda: eng.detector.detect(feats.text, present), calls)
    domain, now, ids = eng.detector.detect(feats.text, present), clock.t, [d.id for d in deps]
    learn_domain = domain if policy.bandit.per_domain.enabled else None
    pc["store.read_pool (breakers+arms+lkgp)"] = tc(lambda: eng.store.read_pool(ids, learn_domain, "auto"), calls)
    _, breakers, garms, darms, _ = eng.store.read_pool(ids, learn_domain, "auto")
    pc["breakers (Engine._breakers over the pool)"] = tc(lambda: eng._breakers(ids, breakers, now), calls)
    prior = policy.bandit.per_domain.prior_strength if learn_domain else None
    pc["arm views (bandit.arm_weights: decay + blend, over the pool)"] = tc(
        lambda: arm_weights(garms, darms, eng.store.tick(), eng.gamma, prior, eng._fresh), calls)
    for alias, strat in usable:
        s_obj, (pool, ctx) = capture_select_inputs(eng, strat, alias, messages, deps)
        pc[f"select:{strat} (incl. the views it reads)"] = tc(lambda: s_obj.select(unread_copy(pool), ctx), calls)
    eng2, clock2, deps2 = build_engine(specs, policy)  # record() changes the state: a throwaway engine
    warm_engine(eng2, clock2, deps2, specs, messages, ["auto"])
    d0 = eng2.decide("auto", messages, deps2)
    oc = Outcome(d0.deployment_id, success=True, latency_s=1.0, quality=0.8)
    pc["engine.record (success)"] = tc(lambda: eng2.record(d0, oc), calls)
    return pc


def warm_calls(mode: str, prompts) -> int:
    """Untimed calls of a mode before it is timed: the real prompts, every one twice,
    so that RE2's lazy DFAs have met the texts (a fresh process's first pass is reported apart:
    docs/benchmarks.md, domain detection)."""
    return {"real_prompts": 2 * len(prompts), "steady": max(WARM_CALLS, 2 * len(prompts))}.get(mode, WARM_CALLS)


def bench_ours(report: dict, policy, sizes, calls, messages) -> None:
    """The report's ``ours``, ``ours_modes`` and ``pieces``, and their notes."""
    ours, modes, notes, prompts = report["ours"], report["ours_modes"], report["notes"], real_prompts()
    if not prompts:
        notes.append("../shared/data not found: the real-prompt modes use the synthetic prompt")
    notes += [f"alias {a} not in the shipped policy: skipped" for a, _ in ALIASES if a not in policy.aliases]
    for n in sizes:
        # An engine over pool_specs(n): one decision of each alias (one that fails noted and left
        # out), then warm_engine.
        specs, usable = pool_specs(n), []
        eng, clock, deps = build_engine(specs, policy)
        # (each alias's strategy as the policy ships it: `auto` and `auto/smart` became contextual)
        for alias, strat in [(a, policy.aliases[a].strategy) for a, _ in ALIASES if a in policy.aliases]:
            try:
                eng.decide(alias, messages, deps)
                usable.append((alias, strat))
            except Exception as e:  # a strategy not registered, etc.
                notes.append(f"n={n} {alias} ({strat}): decide() failed: {type(e).__name__}: {e}")
        warm_engine(eng, clock, deps, specs, messages, [a for a, _ in usable] or ["auto"])
        clock.t += 1.0
        cells = {(alias, mode): (step, warm_calls(mode, prompts)) for alias, _ in usable
                 for mode, step in decide_steps(eng, clock, alias, messages, prompts, deps, specs).items()}
        timed = bench.interleaved(cells, calls)
        ours[str(n)], modes[str(n)] = {}, {}
        for alias, strat in usable:
            ours[str(n)][alias] = dict(timed[(alias, "fixed")], strategy=strat)
            modes[str(n)][alias] = {"strategy": strat, **{
                mode: timed[(alias, mode)] for mode in ("explained", "real_prompts", "steady") if (alias, mode) in timed}}
        if n == TARGET_N:
            for alias, st in time_unseen(eng, [a for a, _ in usable], deps).items():
                modes[str(n)][alias]["unseen"] = st
        report["pieces"][str(n)] = pieces(eng, clock, deps, policy, usable, messages, specs, calls)


def router_only(b: LiteLLMBaseline, strat: str, messages, now: float, calls: int) -> dict:
    """LiteLLM's Router selection call alone, without the baseline's harness (cost-based-routing has
    no sync selector: awaited inside one running coroutine)."""
    router = b.router
    if strat != "cost-based-routing":
        with b._activate(now):
            raw = bench.time_calls(lambda: router.get_available_deployment(
                model=MODEL_GROUP, messages=messages, request_kwargs={}), calls)
        return dict(raw, measured="Router.get_available_deployment() (sync)")

    def select():
        return router.async_get_available_deployment(model=MODEL_GROUP, request_kwargs={}, messages=messages)

    with b._activate(now):
        raw = bench.summarize(b._loop.run_until_complete(bench.atime_calls(select, calls, WARM_CALLS)))
    return dict(raw, measured="await Router.async_get_available_deployment() inside one running loop")


def bench_litellm(report: dict, sizes, calls, messages) -> None:
    """The report's ``litellm``, and its notes."""
    out, notes = report["litellm"], report["notes"]
    for n in sizes:
        specs, res = pool_specs(n), {}
        for strat in LITELLM_STRATEGIES:
            try:
                with LiteLLMBaseline(strat, specs, seed=1) as b:  # it reads the ids and prices
                    r, lat, now = random.Random(7), {s["id"]: s["latency_s"] for s in specs}, 0.0
                    for k in range(WARM_OUTCOMES):
                        now += 0.5
                        cid = b.choose(messages, now) if k >= n else specs[k]["id"]  # each tried once first
                        latency = lat[cid] * r.uniform(0.7, 1.5)
                        b.record(cid, now=now + latency, latency_s=latency, success=True, input_tokens=512,
                                 output_tokens=200)
                    now += 5.0
                    st = res[strat] = dict(bench.time_calls(lambda: b.choose(messages, now), calls),
                                           measured="LiteLLMBaseline.choose()")
                    st["router_only"] = router_only(b, strat, messages, now, calls)
            except Exception as e:  # noted in the report; the other strategies are still measured
                notes.append(f"n={n} {strat}: {type(e).__name__}: {e}")
                traceback.print_exc()
        out[str(n)] = res


def fmt(st: dict | None) -> str:
    return "-" if not st else f"{st['p50_us']:.1f} / {st['p90_us']:.1f} / {st['p99_us']:.1f} / {st['mean_us']:.1f}"


def render(report: dict) -> str:
    c, ours, lit, modes = report["conditions"], report["ours"], report["litellm"], report.get("ours_modes") or {}
    sizes = c["pool_sizes"]
    by_n = [f"n={n}" for n in sizes]
    rows = [[f"ours `{alias}` ({strat})"] + [fmt(ours.get(str(n), {}).get(alias)) for n in sizes] for alias, strat in ALIASES]
    for strat in LITELLM_STRATEGIES:
        rows.append([f"LiteLLM `{strat}` choose()"] + [fmt(lit.get(str(n), {}).get(strat)) for n in sizes])
        rows.append([f"LiteLLM `{strat}` router only"]
                    + [fmt((lit.get(str(n), {}).get(strat) or {}).get("router_only")) for n in sizes])
    lines = ["# Routing decision overhead", "",
             "Microseconds per call, `p50 / p90 / p99 / mean`. Generated by `benchmarks/decision_overhead.py`.", "",
             "## Full decision", "", *bench.md_table(["path"] + by_n, rows)]
    if modes:
        mode_rows = [[f"`{alias}` ({strat})", mode.replace("_", " ")] + [fmt(s) for s in sts]
                     for alias, strat in ALIASES for mode in ("explained", "real_prompts", "steady", "unseen")
                     if any(sts := [(modes.get(str(n), {}).get(alias) or {}).get(mode) for n in sizes])]
        lines += ["", "## Our decision under other conditions", "",
                  "- `fixed`: the table above (one synthetic keyword-dense 2 KB prompt, learned state frozen);",
                  "- `explained`: the same, plus `Decision.as_dict()` (every candidate's score row and terms built);",
                  "- `real prompts`: 2 KB RouterArena prompts, a different one on every call, state frozen;",
                  "- `steady`: real prompts, and every decision followed by a recorded outcome (untimed), so the",
                  "  learned state changes between decisions, as in a serving proxy;",
                  "- `unseen` (n=16 only): 2 KB GSM8K prompts the process has never scanned, once each.", "",
                  *bench.md_table(["alias", "mode"] + by_n, mode_rows)]
    keys = list(dict.fromkeys(k for n in sizes for k in report["pieces"].get(str(n), {})))
    lines += ["", "## Pieces of our decision (same inputs)", "",
              *bench.md_table(["piece"] + by_n, [[k] + [fmt(report["pieces"].get(str(n), {}).get(k)) for n in sizes]
                                                 for k in keys]),
              "", "## Targets (n=16, reported, never asserted)", "", *(f"- {t}" for t in report["targets"]),
              "", "## Conditions", "", *(f"- {k}: {v}" for k, v in c.items())]
    if report.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {x}" for x in report["notes"]]
    return "\n".join(lines) + "\n"


def targets(report: dict) -> list[str]:
    res = report["ours"].get(str(TARGET_N), {})
    if not res:
        return [f"no n={TARGET_N} measurement of ours"]
    modes, out = (report.get("ours_modes") or {}).get(str(TARGET_N), {}), []
    for alias, st in res.items():
        for mode, m in [("fixed", st)] + [(k, v) for k, v in (modes.get(alias) or {}).items() if isinstance(v, dict)]:
            ok50, ok99 = m["p50_us"] < TARGET_P50_US, m["p99_us"] < TARGET_P99_US
            out.append(f"`{alias}` ({st['strategy']}, {mode.replace('_', ' ')}): p50 {m['p50_us']:.1f} us vs target < "
                       f"{TARGET_P50_US:g} us -> {'met' if ok50 else 'NOT met'} ({m['p50_us'] / TARGET_P50_US:.2f}x target); "
                       f"p99 {m['p99_us']:.1f} us vs target < {TARGET_P99_US:g} us -> {'met' if ok99 else 'NOT met'}")
    return out


def ratio_targets(report: dict) -> list[str]:
    """Issue 20's decision-cost targets, contextual `auto` first and UCB1 beside it: each mode's p50
    at n=16 over LiteLLM `simple-shuffle` choose()'s in the same run, MET or by how much it misses."""
    base = ((report.get("litellm") or {}).get(str(TARGET_N)) or {}).get("simple-shuffle")
    if not base:
        return [f"no LiteLLM `simple-shuffle` measurement at n={TARGET_N}: no ratio"]
    out, modes = [], (report.get("ours_modes") or {}).get(str(TARGET_N), {})
    for alias in ("auto/contextual", "auto"):
        m = modes.get(alias) or {}
        r = {k: m[k]["p50_us"] / base["p50_us"] for k in RATIO_MODES if k in m}
        ok = len(r) == len(RATIO_MODES) and max(r.values()) <= RATIO_TARGET
        out.append(f"`{alias}` ({m.get('strategy')}) p50 <= {RATIO_TARGET:g}x LiteLLM `simple-shuffle` choose() "
                   f"({base['p50_us']:.1f} us) at n={TARGET_N}, real prompts, steady and unseen: "
                   f"**{'MET' if ok else 'NOT MET'}** (" + "; ".join(
                       f"{k.replace('_', ' ')} {m[k]['p50_us']:.1f} us = {v:.2f}x"
                       + ("" if v <= RATIO_TARGET else f", over by {v - RATIO_TARGET:.2f}x") for k, v in r.items()) + ")")
    return out


HOSTILE_POOL = [Deployment(id=f"d-{i}", model_name=f"m{i}", model=f"p{i}/model-{i}", provider=f"p{i}",
                           input_cost_per_1m=0.5 + i, output_cost_per_1m=1.0 + i) for i in range(16)]


def hostile_cases():
    word = "write a python function that parses json and explain the algorithm step by step "
    for size in (1_000, 16_000, 256_000, 1_000_000, 4_000_000):
        yield "prompt bytes", size, [{"role": "user", "content": (word * (size // len(word) + 1))[:size]}], None
    for n in (10, 1_000, 10_000, 100_000):
        yield "messages", n, [{"role": "user" if i % 2 else "assistant", "content": f"turn {i} about code"}
                              for i in range(n)], None
    for n in (10, 1_000, 10_000, 50_000):
        tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing", "parameters": {
            "type": "object", "properties": {"x": {"type": "string"}}}}} for i in range(n)]
        yield "tools", n, [{"role": "user", "content": "call a tool"}], tools
    for size in (1_000, 1_000_000):
        yield "NUL bytes", size, [{"role": "user", "content": "\x00" * size}], None
        yield "invalid unicode", size, [{"role": "user", "content": "\udcff" * size}], None
    for depth in (10, 1_000, 50_000):
        nested: object = "deep"
        for _ in range(depth):
            nested = [nested]
        yield "nesting depth", depth, [{"role": "user", "content": nested}], None


def hostile(policy, repeats: int) -> int:
    """--hostile (module docstring): results/hostile_inputs.{json,md}."""
    engine = Engine(policy, rng=random.Random(0))
    engine.decide("auto", [{"role": "user", "content": "warm up"}], HOSTILE_POOL)
    rows = []
    for kind, size, messages, tools in hostile_cases():
        decide = functools.partial(engine.decide, tools=tools)
        med = statistics.median(decide_ns(decide, "auto", messages, HOSTILE_POOL) / 1e9 for _ in range(repeats))
        rows.append({"input": kind, "size": size, "median_ms": med * 1e3, "us_per_unit": med * 1e6 / size})
        print(f"{kind:<16} {size:>10} {med * 1e3:>10.3f} ms {med * 1e6 / size:>12.4f} us per unit", flush=True)
    conditions = bench.conditions(repeats=repeats, pool=len(HOSTILE_POOL), alias="auto",
                                  max_scan_chars=policy.domains.max_scan_chars)
    md = "\n".join(["# Decision cost on hostile inputs (`benchmarks/decision_overhead.py --hostile`)", "",
                    f"Conditions: {conditions}", "", *bench.md_table(["input", "size", "median ms", "us per unit"], [
                        [r["input"], r["size"], f"{r['median_ms']:.3f}", f"{r['us_per_unit']:.4f}"] for r in rows], "---:")])
    bench.write_results("hostile_inputs", {"conditions": conditions, "rows": rows}, md + "\n", indent=1)
    return 0


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, calls=3000, sizes="4,16,64",
                           hostile=(False, "only the decision's cost on hostile inputs"), repeats=5)
    sizes, messages = [int(x) for x in args.sizes.split(",")], bench.dense_messages()
    policy = load_policy()  # plus `auto/contextual`: the shipped `auto` with the contextual strategy
    contextual = policy.aliases["auto"].model_copy(update={"strategy": "contextual"})
    policy = policy.model_copy(update={"aliases": {**policy.aliases, "auto/contextual": contextual}})
    if args.hostile:
        return hostile(policy, args.repeats)
    t0, load_start, speed_start = time.monotonic(), bench.load_average(), bench.machine_speed_ms()
    print(f"decision overhead: {args.calls} calls, machine speed {speed_start} ms", flush=True)
    report = {"conditions": {}, "ours": {}, "ours_modes": {}, "litellm": {}, "pieces": {}, "notes": []}
    bench_ours(report, policy, sizes, args.calls, messages)
    bench_litellm(report, sizes, args.calls, messages)
    report["conditions"] = bench.conditions(
        calls=args.calls, litellm_calls=args.calls, warm_calls_untimed=WARM_CALLS,
        warm_real_prompts="real prompts and steady modes: every real prompt decided twice (untimed) first",
        warm_outcomes_recorded=WARM_OUTCOMES, prompt_bytes=sum(len(m["content"].encode()) for m in messages),
        messages=len(messages), pool_sizes=sizes, timer="time.perf_counter_ns per call",
        gc="gc.collect() before each timing loop, gc.disable() during it",
        policy="aisia_plugin.policy.load_policy() (shipped defaults)",
        engine="Engine(policy, clock=simulated fixed clock, rng=random.Random(1)), MemoryState",
        litellm_measured=("choose(): LiteLLMBaseline harness (RLock, simulated clock/RNG activation, cost-based-routing: "
                          "event-loop run_until_complete + task drain) + LiteLLM selection; router_only: the Router "
                          "selection call alone"),
        wall_s=round(time.monotonic() - t0, 1), loadavg_1_5_15_start=load_start, loadavg_1_5_15_end=bench.load_average(),
        machine_speed_ms_start_end=[speed_start, bench.machine_speed_ms()],
        machine_speed_ms="best of 5 timings of a fixed pure-Python workload (1e6 additions in a loop): the same code "
                         "takes longer on a busier or slower machine; compare runs by it")
    report["targets"] = ratio_targets(report) + targets(report)
    md = render(report)
    bench.write_results("overhead", report, md)
    print("\n" + md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
