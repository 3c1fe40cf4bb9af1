"""Where the plugin's per-request time goes inside a real LiteLLM proxy: cProfile over the proxy's
event loop, one profile per arm, and their difference per request.

The proxy (with the plugin, the same config and instant upstream as benchmarks/proxy_overhead.py)
runs under a small wrapper that starts cProfile on SIGUSR1 and writes the profile on SIGUSR2
(the event loop runs in the main thread, which is what cProfile sees; LiteLLM's thread-pool work,
such as its synchronous success handler, is not in it). The arms run in turn: a warm-up, then
`--requests` sequential requests to the plain model name with the profiler on, then the same to
the alias. The report lists, per request, the functions whose own time (tottime) and whose
inclusive time (cumtime) grew most on the alias path, and the call counts per request that
differ (a deep copy, a second lookup).

    .venv/bin/python benchmarks/profile_proxy.py                 # 2000 requests per arm
    .venv/bin/python benchmarks/profile_proxy.py --requests 300  # a quick look

Writes the two .prof files and the report under benchmarks/out/profile/ (not committed); the
figures are cProfile's (each call costs more under it), for ranking, not for absolute latency."""

from __future__ import annotations

import argparse
import json
import os
import pstats
import signal
import statistics
import sys
import time
from pathlib import Path

import bench
import httpx
from proxy_overhead import ALIAS, PLAIN, _body, _check, bench_proxy

import aisia_plugin.demo.proxy as proxy_mod
from aisia_plugin.demo.proxy import Proxy

OUT = bench.OUT / "profile"
WRAPPER = """#!{python}
# The litellm command under a switchable profiler: SIGUSR1 starts it, SIGUSR2 writes it out.
# AISIA_PROFILE_MODE=cprofile: cProfile over the main thread (the event loop).
# AISIA_PROFILE_MODE=timing: no profiler; the functions named in TIMED are wrapped with a clock,
# and each call's wall time is written (JSON) instead.
import cProfile, functools, gc, importlib, inspect, json, os, signal, sys, time

MODE = os.environ.get("AISIA_PROFILE_MODE", "cprofile")
TIMED = {timed!r}
_state = {{"profiler": None, "n": 0, "patched": False, "times": {{}}}}


def _timed(name, fn):
    times = _state["times"]
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return await fn(*a, **k)
            finally:
                times.setdefault(name, []).append(time.perf_counter() - t0)
    else:
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times.setdefault(name, []).append(time.perf_counter() - t0)
    return wrapper


_gc_started = [0.0]


def _gc_clock(phase, info):
    # The collector's own time per generation (timing mode), as the pseudo-function "gc.genN".
    if phase == "start":
        _gc_started[0] = time.perf_counter()
    else:
        _state["times"].setdefault("gc.gen%d" % info["generation"], []).append(time.perf_counter() - _gc_started[0])


def _patch():
    for name in TIMED:
        mod, rest = name.split(":")
        owner_name, attr = rest.rsplit(".", 1) if "." in rest else (None, rest)
        owner = importlib.import_module(mod)
        if owner_name:
            owner = getattr(owner, owner_name)
        fn = owner.__dict__[attr] if owner_name else getattr(owner, attr)
        if isinstance(fn, property):
            setattr(owner, attr, property(_timed(name, fn.fget), fn.fset))
        elif isinstance(fn, staticmethod):
            setattr(owner, attr, staticmethod(_timed(name, fn.__func__)))
        else:
            setattr(owner, attr, _timed(name, fn))


def _start(*_):
    if MODE == "timing":
        if not _state["patched"]:
            _patch()
            gc.callbacks.append(_gc_clock)
            _state["patched"] = True
        _state["times"].clear()
        return
    _state["profiler"] = cProfile.Profile()
    _state["profiler"].enable()


def _stop(*_):
    _state["n"] += 1
    base = os.path.join(os.getcwd(), "profile-%d" % _state["n"])
    if MODE == "timing":
        with open(base + ".json", "w") as f:
            json.dump(_state["times"], f)
    else:
        p, _state["profiler"] = _state["profiler"], None
        if p is not None:
            p.disable()
            p.dump_stats(base + ".prof")
    open(base + ".done", "w").close()


signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
from litellm import run_server

sys.argv[0] = "litellm"
sys.exit(run_server())
"""
# What the timing mode clocks: the plugin's hooks, and LiteLLM's work that a routing group adds.
TIMED = [
    "aisia_plugin.litellm.callback:AisiaPlugin.async_pre_call_hook",
    "aisia_plugin.litellm.callback:AisiaPlugin.async_filter_deployments",
    "aisia_plugin.litellm.callback:AisiaPlugin.async_log_success_event",
    "aisia_plugin.litellm.callback:AisiaPlugin.async_post_call_response_headers_hook",
    "aisia_plugin.litellm.callback:AisiaPlugin.ensure_groups",
    "aisia_plugin.litellm.callback:_proxy_server",
    "aisia_plugin.litellm.callback:AisiaPlugin._learn_attempt",
    "aisia_plugin.litellm.headers:one_line",
    "aisia_plugin.litellm.events:success",
    "aisia_plugin.litellm.runtime:Runtime.open_call",
    "aisia_plugin.litellm.runtime:Runtime.deployments",
    "aisia_plugin.litellm.runtime:Runtime.explain_entry",
    "aisia_plugin.litellm.runtime:Runtime.note_served",
    "aisia_plugin.litellm.runtime:Runtime.close_call",
    "aisia_plugin.state.memory:MemoryState.prepare",
    "aisia_plugin.decision:Decision.reason",
    "aisia_plugin.metrics:RouterMetrics.decision",
    "aisia_plugin.metrics:RouterMetrics.outcome",
    "aisia_plugin.engine:Engine.decide",
    "aisia_plugin.engine:Engine.record",
    "aisia_plugin.litellm.observability:Observer.decided",
    "aisia_plugin.litellm.observability:Observer.learned",
    "litellm.router:Router.get_model_list",
    "litellm.router:Router.async_get_available_deployment",
    "litellm.router:Router.async_callback_filter_deployments",
    "litellm.proxy.utils:ProxyLogging.pre_call_hook",
    "litellm.proxy.utils:ProxyLogging.post_call_response_headers_hook",
    "litellm.proxy.utils:ProxyLogging.post_call_success_hook",
    "litellm.proxy.route_llm_request:route_request",
    "litellm.router:Router.acompletion",
]
GC = ["gc.gen0", "gc.gen1", "gc.gen2"]


def _drive(client: httpx.Client, proxy: Proxy, model: str, n: int) -> int:
    failed = 0
    for _ in range(n):
        r = client.post(proxy.base_url + "/chat/completions", json=_body(model), headers=proxy.headers)
        failed += r.status_code != 200
    return failed


def _profile(proxy: Proxy, client: httpx.Client, model: str, n: int, k: int, suffix: str = ".prof") -> Path:
    os.kill(proxy.pid, signal.SIGUSR1)
    time.sleep(0.3)
    failed = _drive(client, proxy, model, n)
    time.sleep(1.0)  # the last responses' logging tasks
    os.kill(proxy.pid, signal.SIGUSR2)
    done = proxy.workdir / f"profile-{k}.done"
    deadline = time.monotonic() + 60
    while not done.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the proxy wrote no profile:\n{proxy.log_tail()}")
        time.sleep(0.1)
    if failed:
        print(f"{model}: {failed} of {n} requests failed", file=sys.stderr)
    return proxy.workdir / f"profile-{k}{suffix}"


def _name(key) -> str:
    file, line, func = key
    for marker in ("site-packages/", "aisia_plugin/", "lib/python3"):
        if marker in file:
            file = (marker if marker == "aisia_plugin/" else "") + file.split(marker, 1)[1]
            break
    return f"{file}:{line}({func})"


def _table(stats: pstats.Stats, n: int) -> dict:
    """function -> (calls, tottime, cumtime) per request, in microseconds."""
    return {k: (v[1] / n, 1e6 * v[2] / n, 1e6 * v[3] / n) for k, v in stats.stats.items()}


def report(plain_prof: Path, alias_prof: Path, n: int, top: int) -> str:
    plain, alias = _table(pstats.Stats(str(plain_prof)), n), _table(pstats.Stats(str(alias_prof)), n)
    zero = (0.0, 0.0, 0.0)
    keys = set(plain) | set(alias)
    total = {name: sum(v[1] for v in t.values()) for name, t in (("plain", plain), ("alias", alias))}
    lines = [f"Per request, under cProfile, {n} sequential requests per arm (load average "
             f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end).",
             f"Total own time per request: plain {total['plain']:.0f} us, alias {total['alias']:.0f} us, "
             f"difference {total['alias'] - total['plain']:+.0f} us.", ""]

    def section(title, col, rows):
        lines.append(title)
        lines.append(f"{'alias-plain us':>14} {'alias us':>9} {'calls/req a/p':>14}  function")
        for k in rows:
            a, p = alias.get(k, zero), plain.get(k, zero)
            lines.append(f"{a[col] - p[col]:+14.1f} {a[col]:9.1f} {a[0]:6.1f}/{p[0]:<6.1f}  {_name(k)}")
        lines.append("")

    by_tot = sorted(keys, key=lambda k: alias.get(k, zero)[1] - plain.get(k, zero)[1], reverse=True)[:top]
    section("Own time (tottime) that grew most on the alias path:", 1, by_tot)
    by_cum = sorted(keys, key=lambda k: alias.get(k, zero)[2] - plain.get(k, zero)[2], reverse=True)[:top]
    section("Inclusive time (cumtime) that grew most on the alias path:", 2, by_cum)
    ours = sorted((k for k in alias if "aisia_plugin/" in k[0]), key=lambda k: alias[k][1], reverse=True)[:top]
    section("The plugin's own functions on the alias path, by own time:", 1, ours)
    alias_top = sorted(alias, key=lambda k: alias[k][1], reverse=True)[:top]
    section("The alias path's top functions by own time (everything):", 1, alias_top)
    calls = sorted(keys, key=lambda k: abs(alias.get(k, zero)[0] - plain.get(k, zero)[0]), reverse=True)
    lines.append("Calls per request that differ most (alias/plain):")
    for k in calls[:top]:
        a, p = alias.get(k, zero), plain.get(k, zero)
        lines.append(f"{a[0]:8.1f} / {p[0]:<8.1f} {_name(k)}")
    return "\n".join(lines) + "\n"


def timing_report(plain_json: Path, alias_json: Path, n: int) -> str:
    """Median and mean wall time per call of each clocked function, per arm, in microseconds."""
    arms = {"plain": json.loads(plain_json.read_text()), "alias": json.loads(alias_json.read_text())}
    lines = [f"Wall time per call, no profiler, {n} sequential requests per arm (load average "
             f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end). Async hooks: from the call to"
             f" its return, awaits included.", "",
             f"{'function':<72} {'arm':<6} {'calls/req':>9} {'median us':>10} {'mean us':>9} {'us/req':>8}"]
    for name in TIMED + GC:
        for arm, times in arms.items():
            t = times.get(name)
            if not t:
                continue
            lines.append(f"{name:<72} {arm:<6} {len(t) / n:9.2f} {1e6 * statistics.median(t):10.1f} "
                         f"{1e6 * statistics.fmean(t):9.1f} {1e6 * sum(t) / n:8.1f}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=2000, help="profiled sequential requests per arm")
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--label", default="latest", help="the report's name under benchmarks/out/profile/")
    p.add_argument("--mode", choices=("cprofile", "timing"), default="cprofile",
                   help="cprofile: profiles and their difference; timing: wall time per call of TIMED, no profiler")
    args = p.parse_args(argv)

    work, upstream, _, proxy = bench_proxy("aisia-profile-", AISIA_PROFILE_MODE=args.mode)
    wrapper = work / "litellm-profiled"
    wrapper.write_text(WRAPPER.format(python=sys.executable, timed=TIMED))
    wrapper.chmod(0o755)
    proxy_mod.litellm_executable = lambda: wrapper  # Proxy.start runs the wrapper instead of litellm
    suffix = ".json" if args.mode == "timing" else ".prof"
    try:
        print("starting the proxy under the profiling wrapper ...", file=sys.stderr, flush=True)
        proxy.start()
        with httpx.Client(timeout=30) as client:
            _check(client, proxy, ALIAS)
            _check(client, proxy, PLAIN)
            print(f"warm-up: {args.warmup} per arm ...", file=sys.stderr, flush=True)
            for _ in range(args.warmup):
                _drive(client, proxy, ALIAS, 1)
                _drive(client, proxy, PLAIN, 1)
            print(f"profiling: {args.requests} plain, then {args.requests} alias ...", file=sys.stderr, flush=True)
            plain_prof = _profile(proxy, client, PLAIN, args.requests, 1, suffix)
            alias_prof = _profile(proxy, client, ALIAS, args.requests, 2, suffix)
    finally:
        proxy.stop()
        upstream.stop()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.mode == "timing":
        text = timing_report(plain_prof, alias_prof, args.requests)
    else:
        text = report(plain_prof, alias_prof, args.requests, args.top)
    for src, name in ((plain_prof, "plain"), (alias_prof, "alias")):
        (OUT / f"{args.label}-{name}{suffix}").write_bytes(src.read_bytes())
    (OUT / f"{args.label}.txt").write_text(text)
    print(text)
    print(f"written: {OUT / (args.label + '.txt')} and the .prof files beside it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
