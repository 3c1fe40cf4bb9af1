"""What the fault and security suites share (plain functions over a running proxy; no fixtures):
a request with the `openai` client, the admin endpoints, and polling."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import openai
import pytest

from proxy_harness import deployment, parse_reply, start_proxy

# Uvicorn kills a worker that misses its 5 s health check, which a loaded 2-CPU machine can do
# while the worker imports LiteLLM; the proxies of these suites get longer.
SLOW_MACHINE_ENV = {"TIMEOUT_WORKER_HEALTHCHECK": "120"}
TESTS = Path(__file__).resolve().parent


def start_plugin_proxy(workdir, upstreams: dict, policy, env=None, models=None, litellm_settings=None,
                       general_settings=None, num_workers: int = 1, router_settings=None):
    """A proxy with the plugin's callback line in front of `upstreams` ({name: RunningUpstream};
    or the deployments `models`), `AISIA_POLICY` naming `policy` (a path, or the text of a file
    written as team.yaml in `workdir`); `litellm_settings` and `general_settings` are added to
    the config. The long fuzz and soak runs (tests/long/) start theirs with it too."""
    if isinstance(policy, str):
        path = workdir / "team.yaml"
        path.write_text(policy)
        policy = path
    config = {"model_list": models if models is not None else [deployment(n, u) for n, u in upstreams.items()],
              "litellm_settings": {"callbacks": ["aisia_plugin.litellm.plugin"], **(litellm_settings or {})}}
    if general_settings:
        config["general_settings"] = dict(general_settings)
    if router_settings:
        config["router_settings"] = dict(router_settings)
    return start_proxy(config, workdir, env={"AISIA_POLICY": str(policy), **SLOW_MACHINE_ENV, **(env or {})},
                       num_workers=num_workers, timeout_s=240)


def start_custom_auth_proxy(workdir, upstreams: dict, policy, keys: dict, litellm_settings=None,
                            general_settings=None, models=None, env=None, router_settings=None):
    """`start_plugin_proxy` with LiteLLM's keys from tests/custom_auth_roles.py: `keys` is
    {key: role} or {key: {"role": ..., "models": [...]}}; `env` adds to the proxy's environment."""
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    return start_plugin_proxy(workdir, upstreams, policy, litellm_settings=litellm_settings,
                              general_settings={"custom_auth": "custom_auth_roles.user_api_key_auth",
                                                **(general_settings or {})}, models=models,
                              router_settings=router_settings,
                              env={**(env or {}), "PYTHONPATH": path, "AISIA_TEST_ROLE_KEYS": json.dumps(keys)})


def client_of(proxy, timeout: float = 60) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0, timeout=timeout)


def chat(client, model: str, text: str = "Hello, how are you today?", **kw):
    """(served-by upstream name, response headers) of one chat request."""
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **kw)
    completion = raw.parse()
    return parse_reply(completion.choices[0].message.content)[0], raw.headers


def admin_get(proxy, path: str, **params) -> dict:
    r = httpx.get(proxy.url + path, headers=proxy.headers, params=params, timeout=60)
    assert r.status_code == 200, f"{path}: {r.status_code} {r.text}"
    return r.json()


def stats(proxy) -> dict:
    return admin_get(proxy, "/admin/bandit/stats")


def explain_rows(proxy, request_id: str, limit_s: float = 30.0) -> list[dict]:
    """The explain log's rows of one request by attempt, and in time within an attempt, once every
    attempt's outcome is learned (LiteLLM logs outcomes in the background, after the response).
    One attempt may have several rows: a pass of the filter that refused (every breaker open, say)
    is retried by LiteLLM before any deployment is tried, under the same attempt number, and its
    row comes before the row of the pass that served."""
    deadline = time.monotonic() + limit_s
    while True:
        rows = sorted((e for e in admin_get(proxy, "/aisia/explain", limit=1000)["decisions"]
                       if e["request_id"] == request_id), key=lambda e: (e["attempt"], e["time"]))
        if (rows and all(e["outcome"] for e in rows)) or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def wait_for(predicate, what: str, limit_s: float = 60.0, every_s: float = 0.2, detail=None):
    """Poll until `predicate()` is truthy; fail saying `what` (and `detail()`, when given)."""
    deadline = time.monotonic() + limit_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {limit_s:g} s waiting for {what}" + (f"; now: {detail()}" if detail else ""))
        time.sleep(every_s)
