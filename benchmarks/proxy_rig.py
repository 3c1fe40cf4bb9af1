"""What the proxy benchmarks (proxy_overhead.py, profile_proxy.py, alias_path_count.py) measure on:
the config of N deployments with the plugin's one-candidate alias, the instant upstream in its own
process, real LiteLLM proxies started together, and the one request they all send."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import bench
import httpx

import aisia_plugin.demo.proxy as proxy_mod
from aisia_plugin.demo.proxy import Proxy, deployment
from aisia_plugin.litellm.groups import group_entries

PLAIN, ALIAS = "bench-plain", "auto/bench"
# A proxy's `plugin` setting that loads one of callback_floor.py's do-nothing callbacks instead of the plugin.
FLOOR, BARE = "floor", "bare"
DO_NOTHING = (FLOOR, BARE)
PROMPT = "Write a Python function that merges two sorted lists"
POLICY = """# The benchmark's alias: its only candidate is the plain model's deployment.
version: 1
aliases:
  auto/bench:
    description: The proxy overhead benchmark's alias (one candidate, the plain model's deployment).
    strategy: ucb1
    candidates:
      models: [bench-plain]
"""

WRAPPER = """#!{python}
# The litellm command with a meter switched by signals (benchmarks/proxy_rig.py `metered`).
# SIGUSR1: a full collection, then the meter starts; SIGUSR2: it stops and is written out
# (profile-N.*, then profile-N.done). What it measures, by $AISIA_PROFILE_MODE:
#   gc: the garbage collector's CPU per collection and generation (the collecting thread's), JSON;
#   timing: that too, and the wall time of each call of the functions named in TIMED, JSON;
#   cprofile: cProfile over the main thread (the event loop).
import cProfile, functools, gc, importlib, inspect, json, os, signal, sys, time

MODE = os.environ.get("AISIA_PROFILE_MODE", "gc")
TIMED = {timed!r}
_state = {{"profiler": None, "n": 0, "started": 0, "patched": False, "times": {{}}, "gc_started": 0.0}}


def _timed(name, fn):
    times = _state["times"]
    if inspect.iscoroutinefunction(fn):
        async def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return await fn(*a, **k)
            finally:
                times.setdefault(name, []).append(time.perf_counter() - t0)
    else:
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times.setdefault(name, []).append(time.perf_counter() - t0)
    return functools.wraps(fn)(wrapper)


def _gc_clock(phase, info):
    # The collector's CPU per collection (the pseudo-function "gc.genN"): it runs in the thread
    # that allocated, and does no I/O, so that thread's CPU time is what it costs.
    if phase == "start":
        _state["gc_started"] = time.thread_time()
    else:
        _state["times"].setdefault("gc.gen%d" % info["generation"], []).append(time.thread_time() - _state["gc_started"])


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
        else:
            setattr(owner, attr, _timed(name, fn))


def _start(*_):
    gc.collect()  # what start-up left for the first full collection is charged to no measurement
    if MODE != "cprofile":
        if not _state["patched"]:
            if MODE == "timing":
                _patch()
            gc.callbacks.append(_gc_clock)
            _state["patched"] = True
        _state["times"].clear()
    else:
        _state["profiler"] = cProfile.Profile()
        _state["profiler"].enable()
    _state["started"] += 1
    open(os.path.join(os.getcwd(), "start-%d.done" % _state["started"]), "w").close()


def _stop(*_):
    _state["n"] += 1
    base = os.path.join(os.getcwd(), "profile-%d" % _state["n"])
    if MODE != "cprofile":
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


def run_litellm_as(wrapper: Path, text: str) -> None:
    """From now on Proxy.start runs `wrapper`, an executable of `text`, instead of litellm."""
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(text)
    wrapper.chmod(0o755)
    proxy_mod.litellm_executable = lambda: wrapper


def metered(work: Path, timed=()) -> None:
    """From now on Proxy.start runs the litellm command under WRAPPER (its mode from the proxy's
    $AISIA_PROFILE_MODE, default gc), with the functions `timed` clocked in timing mode."""
    run_litellm_as(work / "litellm-metered", WRAPPER.format(python=sys.executable, timed=list(timed)))


def _signalled(proxy: Proxy, sig, marker: str) -> int:
    """Send `sig` and wait for the k-th `marker` file the wrapper writes in answer: k."""
    k = len(list(proxy.workdir.glob(f"{marker}-*.done"))) + 1
    os.kill(proxy.pid, sig)
    done, deadline = proxy.workdir / f"{marker}-{k}.done", time.monotonic() + 60
    while not done.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the proxy did not answer the meter's signal:\n{proxy.log_tail()}")
        time.sleep(0.05)
    return k


def meter_start(proxy: Proxy) -> None:
    """A full collection in a ``metered`` proxy, then its meter starts from nothing."""
    _signalled(proxy, signal.SIGUSR1, "start")


def meter_stop(proxy: Proxy, suffix: str = ".json") -> Path:
    """Stop a ``metered`` proxy's meter: the file it wrote (JSON: name -> seconds per call)."""
    return proxy.workdir / f"profile-{_signalled(proxy, signal.SIGUSR2, 'profile')}{suffix}"


def collector(path: Path, requests: int) -> dict:
    """A gc meter's file over `requests` requests: the collections and the collector's CPU per
    request (ms), per generation."""
    times = json.loads(path.read_text())
    gens = [times.get(f"gc.gen{g}", []) for g in range(3)]
    return {"collections": [len(t) for t in gens],
            "ms_per_request": [round(1000.0 * sum(t) / max(1, requests), 4) for t in gens]}


@contextmanager
def upstream():
    """The instant upstream, run by the upstream module's command line (its own process, so that
    neither the client's nor a proxy's CPU pays for it): yields its base URL."""
    proc = subprocess.Popen([sys.executable, "-m", "aisia_plugin.demo.upstream", "--json", "--spec",
                             "instant:latency_ms=0,reply_words=8"], cwd=str(bench.REPO), stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the simulated upstream did not start")
        yield json.loads(line)["base_url"]
    finally:
        proc.terminate(), proc.wait(timeout=10)


def bench_config(base_url: str, deployments: int = 1, plugin: bool | str = True, one_group: bool = False,
                 native_group: bool = False) -> dict:
    """The proxies' config: the plain model (id bench-1) and `deployments - 1` fillers on the same
    upstream (with `one_group`, under the plain model's name too); with `plugin`, the plugin as its
    callback (the policy comes from $AISIA_POLICY), or with FLOOR or BARE callback_floor.py's; with
    `native_group`, LiteLLM's own routing group under the alias's name, of the shape the plugin
    installs for it (groups.group_entries)."""
    models = [deployment(PLAIN, base_url, id="bench-1")]
    models += [deployment(PLAIN if one_group else f"bench-filler-{i}", base_url, id=f"bench-filler-{i}")
               for i in range(1, deployments)]
    config = {"model_list": models, "router_settings": {"routing_strategy": "simple-shuffle"}}
    if native_group or plugin in DO_NOTHING:  # (a do-nothing callback serves the alias through LiteLLM's group)
        config["router_settings"]["routing_groups"] = group_entries({ALIAS: [PLAIN]})
    callback = f"callback_floor.{plugin}" if plugin in DO_NOTHING else "aisia_plugin.litellm.plugin"
    return {**config, "litellm_settings": {"callbacks": [callback]}} if plugin else config


@contextmanager
def proxies(base_url: str, deployments: int, work: Path, plugin: dict[str, bool | str], one_group: bool = False,
            timeout_s: float = 90, native_group: bool = False, **env):
    """name -> a proxy of ``bench_config`` (the plugin its callback where ``plugin[name]``, the
    policy POLICY), one worker each, started together (within ``timeout_s``), stopped on leaving;
    ``env`` for every one.

    Each has served one request to a path no route answers before it is yielded: FastAPI builds
    its included routers' route contexts (about 90k objects in litellm 1.108's proxy) the first
    time a request is matched that far down the route table, which the plugin does at start
    (admin._put_first) and any proxy does on its first 404, probe or admin call. Without it the
    proxies without the plugin would hold a smaller heap than a proxy in service, and their full
    garbage collections would cost less (proxy_profile.md, "Concurrency")."""
    work.mkdir(parents=True, exist_ok=True)
    (policy := work / "bench-policy.yaml").write_text(POLICY)
    running = {name: Proxy(bench_config(base_url, deployments, on, one_group, native_group), work / name,
                           timeout_s=timeout_s,
                           env={"AISIA_POLICY": str(policy), **env} if on is True else env or None)
               for name, on in plugin.items()}
    for name, on in plugin.items():
        if on in DO_NOTHING:
            # LiteLLM loads a callback module found beside its config file (proxy/types_utils/utils.py
            # get_instance_fn); a PYTHONPATH entry instead would lengthen every failed import's search.
            shutil.copy(Path(__file__).with_name("callback_floor.py"), running[name].workdir)
    try:
        with ThreadPoolExecutor(len(running)) as pool:
            list(pool.map(Proxy.start, running.values()))
        for proxy in running.values():
            httpx.get(proxy.url + "/bench-no-such-route", headers=proxy.headers, timeout=timeout_s)
        yield running
    finally:
        for proxy in running.values():
            proxy.stop(timeout_s=60)


def body(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16}


def ask(client, proxy: Proxy, model: str):
    """The benchmark's request for ``model`` to ``proxy`` (an httpx.AsyncClient's is awaited)."""
    return client.post(proxy.base_url + "/chat/completions", json=body(model), headers=proxy.headers)


def drive(client: httpx.Client, proxy: Proxy, model: str, n: int) -> int:
    """``n`` sequential requests: how many failed."""
    return sum(ask(client, proxy, model).status_code != 200 for _ in range(n))


def check(client: httpx.Client, proxy: Proxy, model: str) -> dict:
    """One request that must succeed: the routing headers it came back with."""
    r = ask(client, proxy, model)
    if r.status_code != 200:
        raise SystemExit(f"{model} on {proxy.url}: HTTP {r.status_code}: {r.text[:300]}\n{proxy.log_tail()}")
    return {k: v for k, v in r.headers.items() if k.startswith(("x-aisia", "x-litellm-model-id"))}
