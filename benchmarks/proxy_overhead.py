"""What the plugin adds to a LiteLLM proxy's request path: every arm in one run, over HTTP.

The ratios to plain LiteLLM, beside the run's own noise floor. Per model-list size
(``--deployments 1,16,200``: the benchmark's deployment plus fillers on the same upstream), five
proxies of the same config, each its own process, one worker, fed by one instant simulated
upstream (its own process). The arms (``ARMS``, described in the Markdown it writes): **litellm**
and **litellm_b** without callback, whose distance is the run's noise floor; **plain**, the plugin
loaded but only plain traffic (what plain requests pay for the plugin being there); **alias**, only
``auto/bench``, whose one candidate is that same deployment (the plugin's whole path); **floor**,
``auto/bench`` served by LiteLLM's own routing group through callback_floor.py's do-nothing callback
(what any router built as a callback with the plugin's hooks and headers costs).

Sequential: one client, one request per arm per round, the arms' order a seeded shuffle per round;
the median latency per arm and the proxy's CPU time per request. Concurrent: 32 clients in closed
loop, blocks of a few seconds, the arms taking turns in shuffled orders too; throughput (median of
blocks) and the proxy's CPU time per request (/proc/<pid>/stat: on a shared machine the wall-clock
figures move with the load, the CPU time much less). Every proxy runs under proxy_rig's meter
(``metered``): a full collection before each phase (what start-up left for the first one is
charged to no arm), and the collector's own CPU and full collections counted per arm.

    .venv/bin/python benchmarks/proxy_overhead.py            # ~9 minutes
    .venv/bin/python benchmarks/proxy_overhead.py --quick    # a smoke run

Writes benchmarks/results/proxy_overhead.json and .md (the conditions, the load, in both)."""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import bench
import httpx
from proxy_rig import ALIAS, FLOOR, PLAIN, PROMPT, ask, check, collector, drive, meter_start, meter_stop, metered, proxies, upstream

# name -> (plugin loaded, model asked for); the first is the reference of every ratio.
ARMS = {"litellm": (False, PLAIN), "litellm_b": (False, PLAIN), "plain": (True, PLAIN), "alias": (True, ALIAS),
        "floor": (FLOOR, ALIAS)}
# Targets (issue 21): ratio to plain LiteLLM; the plain arm's latency and throughput: within the noise.
TARGETS = {"alias": {"latency": 1.02, "cpu": 1.02, "throughput": 0.98}, "plain": {"cpu": 1.005}}


def turns(arms: dict, count: int, seed: int = 0):
    """The arms' order for each of `count` rounds: a seeded shuffle per round, so that over a run
    every arm holds every position about as often (alternating forward and back left the middle
    arms always in the middle)."""
    rng, names = random.Random(seed), list(arms)
    for _ in range(count):
        rng.shuffle(names)
        yield list(names)


def sequential(arms: dict, rounds: int, warmup: int) -> dict:
    """`arms`: name -> (proxy, model). One request per arm per round, in ``turns`` order."""
    times, failures = {name: [] for name in arms}, dict.fromkeys(arms, 0)
    with ExitStack() as stack:
        clients = {name: stack.enter_context(httpx.Client(timeout=30)) for name in arms}
        for name, (proxy, model) in arms.items():
            drive(clients[name], proxy, model, warmup)
            meter_start(proxy)
        cpu0 = {name: bench.cpu_seconds(proxy.pid) for name, (proxy, _) in arms.items()}
        for order in turns(arms, rounds):
            for name in order:
                proxy, model = arms[name]
                t0 = time.perf_counter()
                r = ask(clients[name], proxy, model)
                times[name].append((time.perf_counter() - t0) * 1000.0)
                failures[name] += r.status_code != 200
        cpu = {name: 1000.0 * (bench.cpu_seconds(p.pid) - cpu0[name]) / rounds for name, (p, _) in arms.items()}
    return {"collector": {name: collector(meter_stop(p), rounds) for name, (p, _) in arms.items()},
            "median_ms": {k: statistics.median(v) for k, v in times.items()},
            "p90_ms": {k: statistics.quantiles(v, n=10)[-1] for k, v in times.items()},
            "cpu_ms_per_request": cpu, "failures": failures}


async def _block(proxy, model: str, concurrency: int, seconds: float) -> tuple[int, int, float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    done = failed = 0
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        started = time.perf_counter()
        deadline = started + seconds

        async def worker():
            nonlocal done, failed
            while time.perf_counter() < deadline:
                r = await ask(client, proxy, model)
                done += 1
                failed += r.status_code != 200

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done, failed, time.perf_counter() - started


def concurrent(arms: dict, concurrency: int, blocks: int, seconds: float) -> dict:
    rps, cpu, requests, failures = ({name: [] for name in arms}, *(dict.fromkeys(arms, 0) for _ in range(3)))
    for proxy, _ in arms.values():
        meter_start(proxy)
    for order in turns(arms, blocks):
        for name in order:
            proxy, model = arms[name]
            cpu0 = bench.cpu_seconds(proxy.pid)
            done, failed, elapsed = asyncio.run(_block(proxy, model, concurrency, seconds))
            time.sleep(0.5)  # the proxy finishes its callbacks' work for the last responses
            cpu[name] += bench.cpu_seconds(proxy.pid) - cpu0
            requests[name] += done
            rps[name].append(done / elapsed)
            failures[name] += failed
    return {"rps": {k: statistics.median(v) for k, v in rps.items()}, "rps_blocks": rps, "failures": failures,
            "collector": {k: collector(meter_stop(p), requests[k]) for k, (p, _) in arms.items()},
            "cpu_ms_per_request": {k: 1000.0 * cpu[k] / max(1, requests[k]) for k in arms}}


def measure(n: int, args, base_url: str, work: Path) -> dict:
    """Every arm at `n` deployments: its proxies started together, measured, stopped."""
    bench.progress(f"{n} deployments: starting {len(ARMS)} proxies ...")
    with proxies(base_url, n, work / str(n), {name: plugin for name, (plugin, _) in ARMS.items()},
                 AISIA_PROFILE_MODE="gc") as running:
        arms = {name: (running[name], model) for name, (_, model) in ARMS.items()}
        with httpx.Client(timeout=30) as c:
            seen = {name: check(c, *arm) for name, arm in arms.items()}
        if (any(seen[a].get("x-litellm-model-id") != "bench-1" or "x-aisia-alias" not in seen[a] for a in ("alias", "floor"))
                or any(k.startswith("x-aisia") for k in seen["plain"])):
            raise SystemExit(f"the alias did not go through its callback to bench-1, or a plain request did: {seen}")
        bench.progress(f"{n} deployments: sequential, {args.rounds} rounds ...")
        seq = sequential(arms, args.rounds, args.warmup)
        bench.progress(f"{n} deployments: concurrent, {args.blocks} blocks x {args.block_seconds:g} s per arm ...")
        conc = concurrent(arms, args.concurrency, args.blocks, args.block_seconds)
    figures = {"latency_ms": seq["median_ms"], "latency_p90_ms": seq["p90_ms"], "throughput_rps": conc["rps"],
               "cpu_ms_per_request": conc["cpu_ms_per_request"], "cpu_ms_per_request_sequential": seq["cpu_ms_per_request"]}
    ratios = {metric: {name: v[name] / v["litellm"] for name in ARMS if name != "litellm"}
              for metric, v in (("latency", seq["median_ms"]), ("cpu", conc["cpu_ms_per_request"]),
                                ("cpu_sequential", seq["cpu_ms_per_request"]), ("throughput", conc["rps"]))}
    noise = {m: abs(v["litellm_b"] - 1.0) for m, v in ratios.items()}
    return {"figures": {m: {k: round(x, 3) for k, x in v.items()} for m, v in figures.items()},
            "throughput_blocks_rps": {k: [round(x, 1) for x in v] for k, v in conc["rps_blocks"].items()},
            "ratios": {m: {k: round(x, 4) for k, x in v.items()} for m, v in ratios.items()},
            "noise": {m: round(x, 4) for m, x in noise.items()},
            "collector": {"sequential": seq["collector"], "concurrent": conc["collector"]},
            "verdicts": verdicts(ratios, noise), "failures": {"sequential": seq["failures"], "concurrent": conc["failures"]}}


def verdicts(ratios: dict, noise: dict) -> dict:
    """Each target: met, or by how much it misses (a ratio's distance past its bound)."""
    miss = {f"alias {m}": ratios[m]["alias"] - bound if m != "throughput" else bound - ratios[m]["alias"]
            for m, bound in TARGETS["alias"].items()}
    miss.update({f"plain {m} within noise": abs(ratios[m]["plain"] - 1.0) - noise[m] for m in ("latency", "throughput")})
    miss["plain cpu"] = ratios["cpu"]["plain"] - TARGETS["plain"]["cpu"]
    return {k: "MET" if v <= 0 else f"missed by {v:.3f}" for k, v in miss.items()}


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, deployments=("1,16,200", "model-list sizes, comma-separated"),
                           rounds=(600, "sequential rounds (one request per arm each)"),
                           warmup=(100, "warm-up requests per arm"), blocks=(6, "concurrent blocks per arm"),
                           block_seconds=3.0, concurrency=32, quick=(False, "a smoke run (figures not meaningful)"),
                           no_write=(False, "print the results, do not write benchmarks/results"))
    if args.quick:
        args.rounds, args.blocks, args.block_seconds, args.warmup = 40, 2, 1.0, 10
    sizes = [int(x) for x in args.deployments.split(",")]
    load_start, started = bench.load_average(), time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="aisia-bench-"))
    metered(work)  # every proxy under the collector's meter (proxy_rig.WRAPPER)
    with upstream() as base_url:
        runs = {str(n): measure(n, args, base_url, work) for n in sizes}
    result = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": args.quick,
        "conditions": bench.conditions(
            load_average_at_start=load_start, load_average_at_end=bench.load_average(),
            minutes=round((time.monotonic() - started) / 60, 1),
            proxy="litellm --config (1 worker each), offline flags, no database, master key, simple-shuffle, its route table built by one request to an unknown path before any measured one (as in service)",
            upstream="aisia_plugin.demo.upstream, no added latency, its own process, HTTP/1.1 keep-alive",
            client="httpx on the same machine (sync for sequential, asyncio for concurrent)",
            request=f"one user message ({len(PROMPT)} chars), max_tokens 16, non-streaming",
            alias=f"{ALIAS}: strategy ucb1, one candidate (the {PLAIN} deployment)",
            sequential_rounds=args.rounds, warmup_per_arm=args.warmup, concurrency=args.concurrency,
            blocks_per_arm=args.blocks, block_seconds=args.block_seconds),
        "targets": TARGETS, "runs": runs}
    md = render(result)
    print(md)
    if not args.no_write:
        bench.write_results("proxy_overhead", result, md)
    return 0


def render(r: dict) -> str:
    c = r["conditions"]
    load = lambda xs: ", ".join(f"{x:g}" for x in xs)  # noqa: E731
    out = ["# Proxy overhead of the plugin", "",
           f"Generated {r['generated']} by `benchmarks/proxy_overhead.py`"
           f"{' (--quick: not meaningful)' if r['quick'] else ''} in {c['minutes']} min.", "",
           f"Conditions: {c['platform']}, {c['cpu_count']} CPUs shared with other work (load average "
           f"{load(c['load_average_at_start'])} at the start, {load(c['load_average_at_end'])} at the end); Python "
           f"{c['python']}, litellm {c['litellm']}, aisia_plugin {c['aisia_plugin']}. Proxy: {c['proxy']}. Upstream: "
           f"{c['upstream']}. Client: {c['client']}. Request: {c['request']}. Alias: {c['alias']}. Per model-list "
           f"size, {len(ARMS)} proxies run side by side: {c['sequential_rounds']} sequential rounds (after "
           f"{c['warmup_per_arm']} warm-up requests per arm), then {c['blocks_per_arm']} blocks of "
           f"{c['block_seconds']:g} s per arm at {c['concurrency']} concurrent clients, the arms' order "
           "shuffled (seeded) each round and block.", "",
           "Arms: **litellm** and **litellm_b** = two identical proxies without any callback (their ratio is "
           "this run's noise floor); **plain** = the plugin loaded, only plain-model traffic; **alias** = the "
           "plugin loaded, only `auto/bench` traffic; **floor** = `auto/bench` served by LiteLLM's own routing group "
           "through callback_floor.py's callback, which overrides the plugin's hooks, does nothing in them and sends "
           "the same five headers (the least a router built as such a callback costs). Ratios are to **litellm**; CPU is the proxy process's own "
           "(/proc), per request. Each phase starts after a full collection in every proxy (what start-up left for "
           "the first one is charged to no arm); the collector's own CPU is counted per arm "
           "(`proxy_rig.metered`: gc.callbacks, the collecting thread's CPU). Where the time goes, and the LiteLLM "
           "costs behind what remains: proxy_profile.md.", ""]
    for n, run in r["runs"].items():
        f, q, noise = run["figures"], run["ratios"], run["noise"]
        out += [f"## {n} deployment{'s' if n != '1' else ''} in the config", ""]
        out += bench.md_table(["", *ARMS, "noise floor"], [
            ["median latency (ms)", *(f"{f['latency_ms'][a]:.2f}" for a in ARMS), ""],
            ["p90 latency (ms)", *(f"{f['latency_p90_ms'][a]:.2f}" for a in ARMS), ""],
            [f"throughput at {c['concurrency']} clients (req/s)", *(f"{f['throughput_rps'][a]:.0f}" for a in ARMS), ""],
            [f"proxy CPU per request at {c['concurrency']} clients (ms)",
             *(f"{f['cpu_ms_per_request'][a]:.2f}" for a in ARMS), ""],
            ["proxy CPU per request, sequential (ms)", *(f"{f['cpu_ms_per_request_sequential'][a]:.2f}" for a in ARMS), ""],
            ["of which the garbage collector, sequential / at 32 clients (ms)",
             *(" / ".join(f"{sum(gc[a]['ms_per_request']):.3f}" for gc in run["collector"].values()) for a in ARMS), ""],
            ["full collections, sequential / at 32 clients",
             *(" / ".join(str(gc[a]["collections"][2]) for gc in run["collector"].values()) for a in ARMS), ""],
            *([f"{m} ratio", "1", *(f"{q[m][a]:.3f}" for a in list(ARMS)[1:]), f"±{noise[m]:.3f}"]
              for m in ("latency", "cpu", "cpu_sequential", "throughput"))], "---:")
        out += ["", "Targets: " + "; ".join(f"{k}: **{v}**" for k, v in run["verdicts"].items()) + ".",
                f"Failed requests: {run['failures']}.", ""]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
