"""What the proxy benchmarks (proxy_overhead.py, profile_proxy.py, alias_path_count.py) measure on:
the config of N deployments with the plugin's one-candidate alias, the instant upstream in its own
process, real LiteLLM proxies started together, and the one request they all send."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import bench
import httpx

from aisia_plugin.demo.proxy import Proxy, deployment

PLAIN, ALIAS = "bench-plain", "auto/bench"
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


def bench_config(base_url: str, deployments: int = 1, plugin: bool = True) -> dict:
    """The proxies' config: the plain model (id bench-1) and `deployments - 1` fillers on the same
    upstream; with `plugin`, the plugin as its callback (the policy comes from $AISIA_POLICY)."""
    models = [deployment(PLAIN, base_url, id="bench-1")]
    models += [deployment(f"bench-filler-{i}", base_url) for i in range(1, deployments)]
    config = {"model_list": models, "router_settings": {"routing_strategy": "simple-shuffle"}}
    return {**config, "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"]}} if plugin else config


@contextmanager
def proxies(base_url: str, deployments: int, work: Path, plugin: dict[str, bool], **env):
    """name -> a proxy of ``bench_config`` (the plugin its callback where ``plugin[name]``, the
    policy POLICY), one worker each, started together, stopped on leaving; ``env`` for every one.

    Each has served one request to a path no route answers before it is yielded: FastAPI builds
    its included routers' route contexts (about 90k objects in litellm 1.108's proxy) the first
    time a request is matched that far down the route table, which the plugin does at start
    (admin._put_first) and any proxy does on its first 404, probe or admin call. Without it the
    proxies without the plugin would hold a smaller heap than a proxy in service, and their full
    garbage collections would cost less (proxy_profile.md, "Concurrency")."""
    work.mkdir(parents=True, exist_ok=True)
    (policy := work / "bench-policy.yaml").write_text(POLICY)
    running = {name: Proxy(bench_config(base_url, deployments, on), work / name,
                           env={"AISIA_POLICY": str(policy), **env} if on else env or None)
               for name, on in plugin.items()}
    try:
        with ThreadPoolExecutor(len(running)) as pool:
            list(pool.map(Proxy.start, running.values()))
        for proxy in running.values():
            httpx.get(proxy.url + "/bench-no-such-route", headers=proxy.headers, timeout=30)
        yield running
    finally:
        for proxy in running.values():
            proxy.stop()


def body(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16}


def ask(client, proxy: Proxy, model: str):
    """The benchmark's request for ``model`` to ``proxy`` (an httpx.AsyncClient's is awaited)."""
    return client.post(proxy.base_url + "/chat/completions", json=body(model), headers=proxy.headers)


def check(client: httpx.Client, proxy: Proxy, model: str) -> dict:
    """One request that must succeed: the routing headers it came back with."""
    r = ask(client, proxy, model)
    if r.status_code != 200:
        raise SystemExit(f"{model} on {proxy.url}: HTTP {r.status_code}: {r.text[:300]}\n{proxy.log_tail()}")
    return {k: v for k, v in r.headers.items() if k.startswith(("x-aisia", "x-litellm-model-id"))}
