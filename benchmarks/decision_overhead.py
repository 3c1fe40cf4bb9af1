"""Decision overhead: the cost of one full aisia routing decision vs. LiteLLM's own selection.

A benchmark, not a test: nothing is asserted. Run with

    .venv/bin/python benchmarks/decision_overhead.py [--calls 3000] [--sizes 4,16,64]

What is timed (time.perf_counter_ns around each single call, after an untimed warm-up):

* ours: ``Engine.decide(alias, messages, deployments)`` -- features and domain detection (one
  RE2 pass), alias candidate selection, specialists, circuit breaker, budget, per-arm views
  (decay + per-domain blend), strategy (through the plugin registry), Decision building and the
  observe hook -- for the aliases auto (ucb1), auto/smart (thompson), auto/cheap (cost),
  auto/fast (latency) and auto/lkgp, over pools of 4/16/64 deployments, a 2 KB prompt, learned
  state warmed by ~200 recorded outcomes. ``reserve=True`` (the default; all breakers are CLOSED
  so it writes nothing). Four modes per alias (``decide_steps``): fixed, explained, real prompts,
  steady. Every (alias, mode) cell of one pool size is timed in six turns taken in round robin
  (``interleaved``), so that a slow spell of the shared machine falls on all of them alike.
* pieces: the same steps called separately with the same inputs (extract_features,
  Engine.features incl. plugin hook, DomainDetector.detect, the breaker loop over the pool, the
  per-arm stats loop, each strategy's select() alone on the exact candidates/context the engine
  built) and Engine.record() for reference.
* litellm: ``LiteLLMBaseline(strategy, candidates, seed=1).choose(messages, now)`` for
  simple-shuffle, latency-based-routing, cost-based-routing over the same pools, warmed with the
  same ~200 outcomes; plus ``router_only``: the Router call alone (sync
  ``Router.get_available_deployment``, or for cost-based-routing ``await
  Router.async_get_available_deployment`` timed inside one running coroutine), i.e. without the
  baseline's harness (lock, simulated-clock activation, event-loop round trip, task drain).

GC: gc.collect() before every timing loop and gc.disable() during it (re-enabled after), so the
numbers are the code's own cost; a real proxy also pays occasional GC pauses.
"""

from __future__ import annotations

import os

# LiteLLM must not try to download its cost map (no network here); set before any litellm import.
for _flag in ("LITELLM_LOCAL_MODEL_COST_MAP", "LITELLM_LOCAL_BLOG_POSTS",
              "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "LITELLM_LOCAL_AUTOROUTER_PRESETS",
              "LITELLM_LOCAL_POLICY_TEMPLATES"):
    os.environ.setdefault(_flag, "True")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# (provider, USD per 1M input tokens) -- the seed's COST_PER_1M table (policies/costs.yaml);
# output priced at 3x input, a typical ratio. Base latency (s) per provider for the warm-up.
PROVIDERS = [
    ("cerebras", 0.20, 0.35), ("groq", 0.30, 0.45), ("deepseek", 0.50, 2.2), ("openai", 5.00, 1.4),
    ("anthropic", 8.00, 1.8), ("mistral", 2.00, 1.1), ("gemini", 1.25, 1.0), ("together", 0.80, 1.3),
    ("fireworks", 0.90, 0.9), ("cohere", 1.00, 1.5), ("deepinfra", 0.60, 1.6), ("perplexity", 1.00, 1.7),
]
ALIASES = [("auto", "ucb1"), ("auto/smart", "thompson"), ("auto/cheap", "cost"), ("auto/fast", "latency"),
           ("auto/lkgp", "lkgp"), ("auto/contextual", "contextual")]
# Aliases timed that the shipped policy may not define: the shipped `auto` with another strategy.
EXTRA_ALIASES = {"auto/contextual": "contextual"}
LITELLM_STRATEGIES = ["simple-shuffle", "latency-based-routing", "cost-based-routing"]
WARM_OUTCOMES = 200
WARM_CALLS = 200  # untimed calls before each timing loop
TARGET_N = 16
TARGET_P50_US, TARGET_P99_US = 50.0, 200.0


# ---------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------
def make_messages(total_bytes: int = 2048) -> list[dict]:
    """A system line plus a user message; the contents total exactly ``total_bytes`` UTF-8 bytes."""
    system = "You are a careful senior engineer. Answer precisely and show working code."
    para = ("I have a Python service that calls an HTTP API and parses the JSON response into dataclasses. "
            "Sometimes the function raises a KeyError deep inside the parser and the stack trace is hard "
            "to read. Can you help me debug it, suggest a cleaner class design, and write a pytest test "
            "that reproduces the failure with a fixture? Here is the relevant part of the code:\n"
            "def parse(payload):\n    items = payload['data']['items']\n    return [Item(**x) for x in items]\n")
    need = total_bytes - len(system.encode())
    user = (para * (need // len(para) + 1))[:need]
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    assert sum(len(m["content"].encode()) for m in msgs) == total_bytes
    return msgs


def real_prompt_messages(total_bytes: int = 2048, limit: int = 400) -> list[list[dict]]:
    """RouterArena's prompts (../shared/data, read in place), each padded to ``total_bytes`` UTF-8
    bytes by appending the following prompts: distinct real 2 KB requests, so that no cache sees
    the same text twice in a row. Empty when the data is not beside the checkout."""
    data = HERE.parent.parent / "shared" / "data"
    files = sorted(data.glob("routerarena_*.jsonl")) if data.is_dir() else []
    if not files:
        return []
    prompts = []
    with open(files[0], encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            p = row.get("prompt") or row.get("question") or ""
            if isinstance(p, str) and p.strip():
                prompts.append(p)
    system = "You are a helpful assistant."
    need = total_bytes - len(system.encode())
    out = []
    step = max(1, len(prompts) // limit)  # spread over the file: it is grouped by dataset
    for i in range(0, len(prompts), step)[:limit]:
        text, j = prompts[i], i
        while len(text.encode()) < need:
            j = (j + 1) % len(prompts)
            text += "\n" + prompts[j]
        text = text.encode()[:need].decode("utf-8", "ignore")
        out.append([{"role": "system", "content": system}, {"role": "user", "content": text}])
    return out


def unseen_prompt_messages(total_bytes: int = 2048) -> list[list[dict]]:
    """GSM8K's prompts (../shared/data, read in place), each padded to ``total_bytes`` with the
    following ones: 2 KB requests this process has never scanned (the RouterArena prompts above
    are), for the ``unseen`` figures. Empty when the data is not beside the checkout."""
    import csv

    path = HERE.parent.parent / "shared" / "data" / "routellm_gsm8k_responses.csv"
    if not path.exists():
        return []
    csv.field_size_limit(1 << 30)
    with open(path, newline="", encoding="utf-8") as fh:
        prompts = [row["prompt"] for row in csv.DictReader(fh) if row.get("prompt", "").strip()]
    system = "You are a helpful assistant."
    need = total_bytes - len(system.encode())
    out = []
    for i in range(len(prompts)):
        text, j = prompts[i], i
        while len(text.encode()) < need:
            j = (j + 1) % len(prompts)
            text += "\n" + prompts[j]
        out.append([{"role": "system", "content": system},
                    {"role": "user", "content": text.encode()[:need].decode("utf-8", "ignore")}])
    return out


def time_unseen(eng, aliases, deps, prompts, per_alias: int = 200) -> dict:
    """Each alias decides `per_alias` prompts the process has never seen, once each (disjoint
    slices per alias), timed one by one: the cost a freshly started proxy pays on new text (RE2's
    lazy DFAs meet it for the first time)."""
    pc = time.perf_counter_ns
    out = {}
    for k, alias in enumerate(aliases):
        chunk = prompts[k * per_alias:(k + 1) * per_alias]
        if len(chunk) < per_alias:
            break
        ts = []
        gc.collect()
        gc.disable()
        try:
            for msgs in chunk:
                t0 = pc()
                eng.decide(alias, msgs, deps)
                ts.append(pc() - t0)
        finally:
            gc.enable()
        us = sorted(t / 1000.0 for t in ts)
        out[alias] = {"n": len(us), "p50_us": statistics.median(us), "p99_us": us[min(len(us) - 1, int(0.99 * len(us)))]}
    return out


def pool_specs(n: int) -> list[dict]:
    specs = []
    for i in range(n):
        prov, price, lat = PROVIDERS[i % len(PROVIDERS)]
        specs.append({"id": f"{prov}-model-{i}", "provider": prov, "model": f"{prov}/model-{i}",
                      "input_cost_per_1m": price, "output_cost_per_1m": round(price * 3, 4),
                      "latency_s": lat * (1 + 0.05 * (i // len(PROVIDERS)))})
    return specs


class SimClock:
    def __init__(self, t: float = 1_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------
def machine_speed_ms() -> float:
    """A fixed pure-Python workload's best time of five, in ms: how fast this machine runs Python
    code right now (a shared VM's speed varies from run to run)."""
    def work():
        total = 0
        for i in range(1_000_000):
            total += i
        return total

    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000.0, 1)


def summarize(ns: list[int]) -> dict:
    s = sorted(ns)
    n = len(s)

    def q(p: float) -> float:
        return s[min(n - 1, int(round(p * (n - 1))))] / 1000.0

    return {"p50_us": round(q(0.50), 2), "p90_us": round(q(0.90), 2), "p99_us": round(q(0.99), 2),
            "mean_us": round(statistics.fmean(s) / 1000.0, 2), "max_us": round(s[-1] / 1000.0, 2), "n": n}


def time_calls(fn: Callable[[], object], calls: int, warm: int = WARM_CALLS) -> dict:
    for _ in range(warm):
        fn()
    out = [0] * calls
    pc = time.perf_counter_ns
    gc.collect()
    gc.disable()
    try:
        for i in range(calls):
            t0 = pc()
            fn()
            out[i] = pc() - t0
    finally:
        gc.enable()
    return summarize(out)


# ---------------------------------------------------------------------------------------------
# ours
# ---------------------------------------------------------------------------------------------
def interleaved(cells: dict, calls: int, rounds: int = 6) -> dict:
    """Time every cell's ``step()`` (one call; it returns the nanoseconds of what it timed)
    ``calls`` times, the cells taking turns ``calls // rounds`` calls at a time after their warm-up
    calls: a slow spell of the shared machine then falls on every cell alike instead of on
    whichever was being timed. ``cells``: name -> (step, warm-up calls)."""
    for step, warm in cells.values():
        for _ in range(warm):
            step()
    samples = {k: [] for k in cells}
    chunk = max(1, calls // rounds)
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for k, (step, _) in cells.items():
                add = samples[k].append
                for _ in range(chunk):
                    add(step())
    finally:
        gc.enable()
    return {k: summarize(v) for k, v in samples.items()}


def decide_steps(eng, clock, alias: str, messages, real_prompts, deps, specs, outcome_mod) -> dict:
    """One alias's timed steps: ``fixed`` (the synthetic prompt, learned state unchanged),
    ``explained`` (the same plus ``Decision.as_dict()``), ``real_prompts`` (a different RouterArena
    prompt each call) and ``steady`` (real prompts, and every decision followed by a recorded
    outcome, untimed, as in a serving proxy: nothing computed for one decision can be reused as is
    by the next)."""
    pc = time.perf_counter_ns
    decide = eng.decide

    def fixed():
        t0 = pc()
        decide(alias, messages, deps)
        return pc() - t0

    def explained():
        t0 = pc()
        decide(alias, messages, deps).as_dict()
        return pc() - t0

    steps = {"fixed": fixed, "explained": explained}
    if real_prompts:
        it = itertools.cycle(real_prompts)

        def real():
            msgs = next(it)
            t0 = pc()
            decide(alias, msgs, deps)
            return pc() - t0

        steps["real_prompts"] = real
    r = random.Random(11)
    lat = {sp["id"]: sp["latency_s"] for sp in specs}
    it2 = itertools.cycle(real_prompts or [messages])

    def steady():
        msgs = next(it2)
        clock.t += 0.05
        t0 = pc()
        d = decide(alias, msgs, deps)
        t1 = pc()
        eng.record(d, outcome(outcome_mod, r, d.deployment_id, lat[d.deployment_id]))
        return t1 - t0

    steps["steady"] = steady
    return steps


def import_engine(wait_s: float):
    """Import the engine, retrying while the other engineers' modules are still missing."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            from aisia_plugin import decision, engine, outcome, policy  # noqa: F401
            from aisia_plugin.policy import PolicyError

            try:
                loaded = policy.load_policy()  # unknown strategies fail validation until they exist
            except PolicyError as e:
                raise ImportError(f"shipped policy does not load yet: {str(e).splitlines()[0]}") from e
            extra = {a: loaded.aliases["auto"].model_copy(update={"strategy": st})
                     for a, st in EXTRA_ALIASES.items() if a not in loaded.aliases}
            if extra:
                loaded = loaded.model_copy(update={"aliases": {**loaded.aliases, **extra}})
            return (engine, decision, outcome, policy), loaded
        except ImportError as e:
            if time.monotonic() >= deadline:
                raise
            print(f"[wait] engine import failed ({e}); retrying in 30 s", file=sys.stderr)
            for m in [m for m in sys.modules if m.startswith("aisia_plugin")]:
                del sys.modules[m]
            time.sleep(30)


def build_engine(mods, specs: list[dict], policy):
    engine_mod, decision_mod, outcome_mod, _ = mods
    clock = SimClock()
    eng = engine_mod.Engine(policy, clock=clock, rng=random.Random(1))
    deps = [decision_mod.Deployment(id=s["id"], model_name="bench-pool", model=s["model"], provider=s["provider"],
                                    input_cost_per_1m=s["input_cost_per_1m"],
                                    output_cost_per_1m=s["output_cost_per_1m"]) for s in specs]
    return eng, clock, deps


def outcome(outcome_mod, r: random.Random, dep: str, latency_s: float):
    """A simulated outcome: 3 % provider failures (503), latency 0.7..1.5 x the deployment's,
    quality 0.3..1."""
    ok = r.random() > 0.03
    return outcome_mod.Outcome(dep, success=ok, latency_s=latency_s * r.uniform(0.7, 1.5),
                               status_code=None if ok else 503, quality=r.uniform(0.3, 1.0) if ok else None)


def warm_engine(mods, eng, clock, deps, specs, messages, aliases: list[str]) -> int:
    """~WARM_OUTCOMES outcomes (3 % failures, qualities 0.3..1, as in the steady mode): every
    deployment tried, then routed by the aliases. Some rewards fall below 0.5, so the Beta
    posteriors have both shapes above 1, as in a serving proxy (Thompson then draws with Cheng's
    algorithm, not the shape-1 closed forms)."""
    _, _, outcome_mod, _ = mods
    r = random.Random(7)
    lat = {s["id"]: s["latency_s"] for s in specs}
    recorded = 0
    i = 0
    while recorded < WARM_OUTCOMES:
        alias = aliases[i % len(aliases)]
        i += 1
        clock.t += 0.5
        d = eng.decide(alias, messages, deps)
        dep = d.deployment_id
        if recorded < len(deps):  # make sure each arm has been pulled at least once
            dep = deps[recorded].id
        eng.record(d, outcome(outcome_mod, r, dep, lat[dep]))
        recorded += 1
    return recorded


def capture_select_inputs(plugins_mod, eng, strategy_name: str, alias: str, messages, deps):
    """The exact (candidates, context) the engine hands to the strategy for one decide()."""
    strat = plugins_mod.get_strategy(strategy_name)
    captured = {}
    real = strat.select

    def spy(pool, ctx):
        captured["args"] = (pool, ctx)
        return real(pool, ctx)

    try:
        strat.select = spy  # instance attribute shadows the method
    except AttributeError:
        return None, None
    try:
        eng.decide(alias, messages, deps)
    finally:
        try:
            del strat.select
        except AttributeError:
            pass
    pool, ctx = captured["args"]
    return strat, (pool, ctx)


def unread_copy(pool):
    """A Pool with the same inputs and none of its columns computed yet: a strategy timed on it pays
    for every column it reads, as in a decision (a Pool keeps what it computed)."""
    from aisia_plugin.decision import Pool

    if pool._arm_at is None:  # built from Candidates: nothing lazy to reset
        return pool
    return Pool(pool.deployments, pool.breakers, pool.task_fit, pool._globals, pool._domains, *pool._arm_at)


def bench_ours(mods, policy, sizes, calls, messages, profile_n: int):
    from aisia_plugin import plugins
    from aisia_plugin.bandit import arm_weights
    from aisia_plugin.features import extract_features

    ours, pieces, notes, modes = {}, {}, [], {}
    real_prompts = real_prompt_messages()
    if not real_prompts:
        notes.append("../shared/data not found: the real-prompt modes use the synthetic prompt")
    available = [(a, s) for a, s in ALIASES if a in policy.aliases]
    for a, s in ALIASES:
        if a not in policy.aliases:
            notes.append(f"alias {a} not in the shipped policy: skipped")
    profile_text = profile = None
    for n in sizes:
        specs = pool_specs(n)
        eng, clock, deps = build_engine(mods, specs, policy)
        usable = []
        for alias, strat in available:
            try:
                eng.decide(alias, messages, deps)
                usable.append((alias, strat))
            except Exception as e:  # a strategy not registered yet, etc.
                notes.append(f"n={n} {alias} ({strat}): decide() failed: {type(e).__name__}: {e}")
        warm_engine(mods, eng, clock, deps, specs, messages, [a for a, _ in usable] or ["auto"])
        clock.t += 1.0
        # Untimed first: the real prompts, every one twice, so that RE2's lazy DFAs have met the
        # texts (a fresh process's first pass is reported apart: README, domain detection).
        warm = {"fixed": WARM_CALLS, "explained": WARM_CALLS, "real_prompts": 2 * len(real_prompts),
                "steady": max(WARM_CALLS, 2 * len(real_prompts))}
        cells = {}
        for alias, strat in usable:
            for mode, step in decide_steps(eng, clock, alias, messages, real_prompts, deps, specs, mods[2]).items():
                cells[(alias, mode)] = (step, warm[mode])
        timed = interleaved(cells, calls)
        res, mres = {}, {}
        for alias, strat in usable:
            st = dict(timed[(alias, "fixed")], strategy=strat)
            res[alias] = st
            m = mres.setdefault(alias, {"strategy": strat})
            for mode in ("explained", "real_prompts", "steady"):
                if (alias, mode) in timed:
                    m[mode] = timed[(alias, mode)]
            parts = "  ".join(f"{k} p50 {v['p50_us']:.1f}/p99 {v['p99_us']:.1f}" for k, v in m.items() if isinstance(v, dict))
            print(f"  ours    n={n:<3} {alias:<11} ({strat:<8}) fixed p50 {st['p50_us']:.1f}/p99 {st['p99_us']:.1f}  {parts}",
                  flush=True)
        ours[str(n)] = res
        modes[str(n)] = mres
        if n == TARGET_N:
            unseen = time_unseen(eng, [a for a, _ in usable], deps, unseen_prompt_messages())
            for alias, st in unseen.items():
                mres[alias]["unseen"] = st
                print(f"  ours    n={n:<3} {alias:<11} unseen prompts p50 {st['p50_us']:.1f}/p99 {st['p99_us']:.1f}", flush=True)

        # pieces, same inputs
        pc = {}
        max_chars = policy.domains.max_scan_chars
        pc["extract_features"] = time_calls(lambda: extract_features(messages, None, None, max_chars=max_chars), calls)
        pc["engine.features (one scan: features + domains present, incl. hook)"] = time_calls(
            lambda: eng._scan(messages, None, None), calls)
        feats, present = eng._scan(messages, None, None)
        pc["detect_domain (alone: its own scans)"] = time_calls(lambda: eng.detector.detect(feats.text), calls)
        pc["detect_domain (domains present known)"] = time_calls(lambda: eng.detector.detect(feats.text, present), calls)
        domain = eng.detector.detect(feats.text, present)
        now = clock.t

        ids = [d.id for d in deps]
        learn_domain = domain if policy.bandit.per_domain.enabled else None
        pc["store.read_pool (breakers+arms+lkgp)"] = time_calls(lambda: eng.store.read_pool(ids, learn_domain, "auto"), calls)
        _, breakers, garms, darms, _ = eng.store.read_pool(ids, learn_domain, "auto")

        pc["breakers (Engine._breakers over the pool)"] = time_calls(lambda: eng._breakers(ids, breakers, now), calls)

        def views():
            tick, gamma = eng.store.tick(), eng.gamma
            prior = policy.bandit.per_domain.prior_strength if learn_domain else None
            arm_weights(garms, darms, tick, gamma, prior, eng._fresh)

        pc["arm views (bandit.arm_weights: decay + blend, over the pool)"] = time_calls(views, calls)
        for alias, strat in usable:
            s_obj, args = capture_select_inputs(plugins, eng, strat, alias, messages, deps)
            if s_obj is None:
                notes.append(f"could not capture select() inputs for {strat}")
                continue
            pool, ctx = args
            pc[f"select:{strat} (incl. the views it reads)"] = time_calls(lambda: s_obj.select(unread_copy(pool), ctx),
                                                                          calls)
        # record(), for reference (mutates the learned state: run on a throwaway engine copy)
        eng2, clock2, deps2 = build_engine(mods, specs, policy)
        warm_engine(mods, eng2, clock2, deps2, specs, messages, ["auto"])
        d0 = eng2.decide("auto", messages, deps2)
        oc = mods[2].Outcome(d0.deployment_id, success=True, latency_s=1.0, quality=0.8)
        pc["engine.record (success)"] = time_calls(lambda: eng2.record(d0, oc), calls)
        pieces[str(n)] = pc
        for k, v in pc.items():
            print(f"  piece   n={n:<3} {k:<44} p50 {v['p50_us']:8.1f} us  p99 {v['p99_us']:8.1f} us", flush=True)

        if n == TARGET_N and usable:
            prof = cProfile.Profile()
            alias0 = usable[0][0]
            prof.enable()
            for _ in range(profile_n):
                eng.decide(alias0, messages, deps)
            prof.disable()
            buf = io.StringIO()
            ps = pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime")
            ps.print_stats(20)
            profile_text = f"cProfile of {profile_n} x engine.decide({alias0!r}) at n={n}, sorted by tottime\n" + buf.getvalue()
            top = []
            for (file, line, func), (cc, nc, tt, ct, _) in sorted(ps.stats.items(), key=lambda kv: -kv[1][2])[:15]:
                top.append({"function": f"{file}:{line}({func})", "calls_per_decide": round(nc / profile_n, 2),
                            "tottime_us_per_decide": round(tt / profile_n * 1e6, 2),
                            "cumtime_us_per_decide": round(ct / profile_n * 1e6, 2)})
            profile = {"alias": alias0, "n": n, "decides": profile_n, "top_by_tottime": top}
    return ours, pieces, notes, profile, profile_text, modes


# ---------------------------------------------------------------------------------------------
# LiteLLM
# ---------------------------------------------------------------------------------------------
def bench_litellm(sizes, calls, messages):
    from litellm_baselines import MODEL_GROUP, LiteLLMBaseline  # benchmarks/, beside this script

    out, notes = {}, []
    for n in sizes:
        specs = pool_specs(n)
        cands = [{"id": s["id"], "input_cost_per_1m": s["input_cost_per_1m"],
                  "output_cost_per_1m": s["output_cost_per_1m"]} for s in specs]
        res = {}
        for strat in LITELLM_STRATEGIES:
            try:
                b = LiteLLMBaseline(strat, cands, seed=1)
            except Exception as e:
                notes.append(f"n={n} {strat}: LiteLLMBaseline failed: {type(e).__name__}: {e}")
                continue
            try:
                r = random.Random(7)
                lat = {s["id"]: s["latency_s"] for s in specs}
                now = 0.0
                for k in range(WARM_OUTCOMES):
                    now += 0.5
                    cid = b.choose(messages, now) if k >= n else specs[k]["id"]  # each tried once first
                    l = lat[cid] * r.uniform(0.7, 1.5)
                    b.record(cid, now=now + l, latency_s=l, success=True, input_tokens=512, output_tokens=200)
                now += 5.0
                st = time_calls(lambda: b.choose(messages, now), calls)
                st["measured"] = "LiteLLMBaseline.choose()"
                # the Router call alone, without the baseline harness
                router = b.router
                if strat == "cost-based-routing":
                    async def loop_async():
                        for _ in range(WARM_CALLS):
                            await router.async_get_available_deployment(model=MODEL_GROUP, request_kwargs={},
                                                                        messages=messages)
                        ns = [0] * calls
                        pcn = time.perf_counter_ns
                        gc.collect()
                        gc.disable()
                        try:
                            for i in range(calls):
                                t0 = pcn()
                                await router.async_get_available_deployment(model=MODEL_GROUP, request_kwargs={},
                                                                            messages=messages)
                                ns[i] = pcn() - t0
                        finally:
                            gc.enable()
                        return ns

                    with b._activate(now):
                        raw = summarize(b._loop.run_until_complete(loop_async()))
                    raw["measured"] = "await Router.async_get_available_deployment() inside one running loop"
                else:
                    with b._activate(now):
                        raw = time_calls(lambda: router.get_available_deployment(model=MODEL_GROUP, messages=messages,
                                                                                 request_kwargs={}), calls)
                    raw["measured"] = "Router.get_available_deployment() (sync)"
                st["router_only"] = raw
                res[strat] = st
                print(f"  litellm n={n:<3} {strat:<22} choose p50 {st['p50_us']:8.1f} us  p99 {st['p99_us']:8.1f} us"
                      f" | router-only p50 {raw['p50_us']:8.1f} us  p99 {raw['p99_us']:8.1f} us", flush=True)
            except Exception as e:
                notes.append(f"n={n} {strat}: {type(e).__name__}: {e}")
                traceback.print_exc()
            finally:
                b.close()
        out[str(n)] = res
    return out, notes


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def fmt(st: dict | None) -> str:
    return "-" if not st else f"{st['p50_us']:.1f} / {st['p90_us']:.1f} / {st['p99_us']:.1f} / {st['mean_us']:.1f}"


def render(report: dict) -> str:
    sizes = report["conditions"]["pool_sizes"]
    c = report["conditions"]
    lines = ["# Routing decision overhead", "",
             "Microseconds per call, `p50 / p90 / p99 / mean`. Generated by `benchmarks/decision_overhead.py`.", "",
             "## Full decision", "",
             "| path | " + " | ".join(f"n={n}" for n in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    rows = []
    for alias, strat in ALIASES:
        rows.append((f"ours `{alias}` ({strat})", [report["ours"].get(str(n), {}).get(alias) for n in sizes]))
    for strat in LITELLM_STRATEGIES:
        rows.append((f"LiteLLM `{strat}` choose()", [report["litellm"].get(str(n), {}).get(strat) for n in sizes]))
        rows.append((f"LiteLLM `{strat}` router only",
                     [(report["litellm"].get(str(n), {}).get(strat) or {}).get("router_only") for n in sizes]))
    for name, sts in rows:
        lines.append(f"| {name} | " + " | ".join(fmt(s) for s in sts) + " |")
    modes = report.get("ours_modes") or {}
    if modes:
        lines += ["", "## Our decision under other conditions", "",
                  "- `fixed`: the table above (one synthetic keyword-dense 2 KB prompt, learned state frozen);",
                  "- `explained`: the same, plus `Decision.as_dict()` (every candidate's score row and terms built);",
                  "- `real prompts`: 2 KB RouterArena prompts, a different one on every call, state frozen;",
                  "- `steady`: real prompts, and every decision followed by a recorded outcome (untimed), so the",
                  "  learned state changes between decisions, as in a serving proxy.", "",
                  "| alias | mode | " + " | ".join(f"n={n}" for n in sizes) + " |", "|---|---|" + "---|" * len(sizes)]
        for alias, strat in ALIASES:
            for mode in ("explained", "real_prompts", "steady"):
                sts = [(modes.get(str(n), {}).get(alias) or {}).get(mode) for n in sizes]
                if any(sts):
                    lines.append(f"| `{alias}` ({strat}) | {mode.replace('_', ' ')} | " + " | ".join(fmt(x) for x in sts) + " |")
    lines += ["", "## Pieces of our decision (same inputs)", "",
              "| piece | " + " | ".join(f"n={n}" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
    keys = []
    for n in sizes:
        for k in report["pieces"].get(str(n), {}):
            if k not in keys:
                keys.append(k)
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(fmt(report["pieces"].get(str(n), {}).get(k)) for n in sizes) + " |")
    lines += ["", "## Targets (n=16, reported, never asserted)", ""]
    lines += [f"- {t}" for t in report["targets"]]
    lines += ["", "## Conditions", ""]
    for k, v in c.items():
        lines.append(f"- {k}: {v}")
    if report.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {x}" for x in report["notes"]]
    if report.get("profile"):
        p = report["profile"]
        lines += ["", f"## Hot spots (cProfile, {p['decides']} x decide({p['alias']!r}), n={p['n']}, by own time)", "",
                  "| function | calls/decide | own us/decide | cum us/decide |", "|---|---|---|---|"]
        for r in p["top_by_tottime"]:
            lines.append(f"| `{r['function']}` | {r['calls_per_decide']} | {r['tottime_us_per_decide']} | "
                         f"{r['cumtime_us_per_decide']} |")
        lines += ["", "cProfile inflates per-call overhead of small Python functions; use it for ranking, not absolutes."]
    return "\n".join(lines) + "\n"


def targets(report: dict) -> list[str]:
    out = []
    res = report["ours"].get(str(TARGET_N), {})
    if not res:
        return [f"no n={TARGET_N} measurement of ours"]
    modes = (report.get("ours_modes") or {}).get(str(TARGET_N), {})
    for alias, st in res.items():
        for mode, m in [("fixed", st)] + [(k, v) for k, v in (modes.get(alias) or {}).items() if isinstance(v, dict)]:
            ok50 = m["p50_us"] < TARGET_P50_US
            ok99 = m["p99_us"] < TARGET_P99_US
            out.append(f"`{alias}` ({st['strategy']}, {mode.replace('_', ' ')}): p50 {m['p50_us']:.1f} us vs target < "
                       f"{TARGET_P50_US:g} us -> {'met' if ok50 else 'NOT met'} ({m['p50_us'] / TARGET_P50_US:.2f}x target); "
                       f"p99 {m['p99_us']:.1f} us vs target < {TARGET_P99_US:g} us -> {'met' if ok99 else 'NOT met'}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--litellm-calls", type=int, default=None, help="default: --calls")
    ap.add_argument("--sizes", default="4,16,64")
    ap.add_argument("--profile-decides", type=int, default=3000)
    ap.add_argument("--wait-import-s", type=float, default=600.0)
    ap.add_argument("--skip-litellm", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    lcalls = args.litellm_calls or args.calls
    messages = make_messages(2048)

    mods, policy = import_engine(args.wait_import_s)
    import litellm

    print(f"decision overhead: python {platform.python_version()}, litellm {getattr(litellm, 'version', '?')}, "
          f"{args.calls} calls", flush=True)
    t0 = time.monotonic()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    speed_start = machine_speed_ms()
    ours, pieces, notes, profile, profile_text, modes = bench_ours(mods, policy, sizes, args.calls, messages,
                                                            args.profile_decides)
    lit, lnotes = ({}, ["--skip-litellm"]) if args.skip_litellm else bench_litellm(sizes, lcalls, messages)
    try:
        from importlib.metadata import version as _v
        litellm_version = _v("litellm")
    except Exception:
        litellm_version = getattr(litellm, "version", "?")
    report = {
        "conditions": {
            "python": platform.python_version(), "implementation": platform.python_implementation(),
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "litellm": litellm_version,
            "calls": args.calls, "litellm_calls": lcalls, "warm_calls_untimed": WARM_CALLS,
            "warm_real_prompts": "real prompts and steady modes: every real prompt decided twice (untimed) first",
            "warm_outcomes_recorded": WARM_OUTCOMES, "prompt_bytes": sum(len(m["content"].encode()) for m in messages),
            "messages": len(messages), "pool_sizes": sizes, "timer": "time.perf_counter_ns per call",
            "gc": "gc.collect() before each timing loop, gc.disable() during it",
            "policy": "aisia_plugin.policy.load_policy() (shipped defaults)",
            "engine": "Engine(policy, clock=simulated fixed clock, rng=random.Random(1)), MemoryState",
            "litellm_measured": ("choose(): LiteLLMBaseline harness (RLock, simulated clock/RNG activation, "
                                 "cost-based-routing: event-loop run_until_complete + task drain) + LiteLLM "
                                 "selection; router_only: the Router selection call alone"),
            "wall_s": round(time.monotonic() - t0, 1),
            "loadavg_1_5_15_start": load_start,
            "loadavg_1_5_15_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "machine_speed_ms_start_end": [speed_start, machine_speed_ms()],
            "machine_speed_ms": "best of 5 timings of a fixed pure-Python workload (1e6 additions in a loop): "
                                "the same code takes longer on a busier or slower machine; compare runs by it",
        },
        "ours": ours, "ours_modes": modes, "litellm": lit, "pieces": pieces, "notes": notes + lnotes, "profile": profile,
    }
    report["targets"] = targets(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overhead.json").write_text(json.dumps(report, indent=2) + "\n")
    md = render(report)
    (args.out / "overhead.md").write_text(md)
    print()
    print(md)
    if profile_text:
        print(profile_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
