"""What the hostile-tenant suites share (tests/test_hostile_tenant_failures.py, tests/test_hostile_tenant_flood.py, tests/long/): three simulated
upstreams behind three LiteLLM providers (openai/, hosted_vllm/, lm_studio/: what makes a failure on
two of them "two providers"), two tenant keys through LiteLLM's ``custom_auth``
(tests/custom_auth_roles.py), the requests a hostile tenant sends, and the breakers as the admin
endpoint reports them."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from fault_helpers import admin_get, start_custom_auth_proxy
from proxy_harness import deployment

# upstream name -> the LiteLLM provider its deployment is declared with (each speaks OpenAI's API)
PROVIDERS = {"hx-openai": "openai", "hx-vllm": "hosted_vllm", "hx-studio": "lm_studio"}
NAMES = list(PROVIDERS)
ALIAS = "t/all"
TENANT_A, TENANT_B = "sk-tenant-a-hostile", "sk-tenant-b-plain"
KEYS = {TENANT_A: "internal_user", TENANT_B: "internal_user"}
UPSTREAM_TIMEOUT_S = 20  # the deployments' own timeout: a client's is what fires


def policy(state: str = "", failure_threshold: int = 5) -> str:
    """One alias over the three providers; ``failure_threshold: 5`` as in the issue's probe, and a
    breaker timeout long enough that an opened breaker is still OPEN when the test looks."""
    return f"""\
version: 1
defaults: false
{state}circuit_breaker:
  failure_threshold: {failure_threshold}
  timeout_s: 600
aliases:
  {ALIAS}:
    description: three providers
    strategy: cost
    candidates: {{models: [{", ".join(NAMES)}]}}
    failover: {{attempts: 2}}
"""


def upstream_specs() -> list[dict]:
    """The three upstreams, each answering in 20 ms (a client's 1 ms timeout always fires, even
    on a warm connection), the openai one the cheapest (the ``cost`` strategy tries it first)."""
    return [{"name": n, "latency_ms": 20, "input_cost_per_1m": 0.1 * (k + 1), "output_cost_per_1m": 0.1 * (k + 1)}
            for k, n in enumerate(NAMES)]


def models(upstreams) -> list[dict]:
    return [deployment(n, upstreams[n], litellm_params={"model": f"{PROVIDERS[n]}/{upstreams[n].spec.model_id}",
                                                         "timeout": UPSTREAM_TIMEOUT_S})
            for n in NAMES]


def start_tenant_proxy(workdir, upstreams, policy_text: str, env=None, router_settings=None):
    return start_custom_auth_proxy(workdir, upstreams, policy_text, KEYS, models=models(upstreams), env=env,
                                   router_settings=router_settings)


def post(proxy, key: str, body: dict, headers=None, timeout: float = 60) -> httpx.Response:
    """One chat request with `key`, the body as given (a client-set ``timeout`` in it reaches the
    proxy, which the openai client's own timeout would not); a stream is read to its end."""
    with httpx.Client(timeout=timeout) as http:
        with http.stream("POST", proxy.base_url + "/chat/completions", json=body,
                         headers={"Authorization": f"Bearer {key}", **(headers or {})}) as r:
            r.read()
            return r


def ask(text: str, **extra) -> dict:
    return {"model": ALIAS, "messages": [{"role": "user", "content": text}], **extra}


def served_by(r: httpx.Response):
    """The upstream that answered a plain (non-streamed) request; None for a failure."""
    if r.status_code != 200:
        return None
    try:
        text = r.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return text.split("served-by=", 1)[1].split()[0] if "served-by=" in text else None


def wait_answering(proxy, limit_s: float = 180.0) -> None:
    """Wait (bounded) until `proxy` serves tenant B's request for the alias: the process answers,
    its plugin has installed the alias and reached its store."""
    deadline, last = time.monotonic() + limit_s, "no answer"
    while time.monotonic() < deadline:
        try:
            r = post(proxy, TENANT_B, ask("Are you ready?"), timeout=30)
            if served_by(r) is not None:
                return
            last = f"{r.status_code}: {r.text[:200]}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)
    raise AssertionError(f"the proxy at {proxy.url} did not serve the alias within {limit_s:g} s: {last}")


def breakers(proxy) -> dict:
    """deployment -> (breaker state, outcomes learned, failures learned) for the three upstreams."""
    rows = admin_get(proxy, "/admin/bandit/stats")
    return {n: (rows[n]["breaker"], rows[n]["count"], round(rows[n]["error_rate"] * rows[n]["count"]))
            if n in rows else ("CLOSED", 0, 0) for n in NAMES}


def reset(proxy) -> None:
    for n in NAMES:
        r = httpx.post(proxy.url + "/admin/bandit/reset", headers=proxy.headers, json={"deployment_id": n}, timeout=30)
        assert r.status_code == 200, r.text


def flood(send, jobs: list, workers: int = 16) -> list:
    """`send(job)` for every job, `workers` at a time; the results in the jobs' order."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(send, jobs))


def error_text(r: httpx.Response) -> str:
    try:
        return json.dumps(r.json())
    except ValueError:
        return r.text


# The proxies run LiteLLM's own cooldown as operators do (its default: on). The plugin spares it
# the failures it does not hold against a deployment (docs/failures.md#litellms-own-cooldown).
LITELLM_COOLDOWNS_ON = None  # no router_settings: LiteLLM's defaults
REDIS_STATE = """\
state:
  backend: redis
  cache_ttl_ms: 200
  flush_ms: 100
"""


def flood_job(k: int) -> tuple[dict, dict]:
    """Tenant A's request `k` (body, headers): 40 % client-set timeouts, 30 % inputs crashing every
    upstream (half of them allowed one attempt only), 30 % failing streams."""
    text = f"Summarise report number {k}"
    kind = k % 10
    if kind < 4:
        return [(ask(text, timeout=0.001), {}), (ask(text), {"x-litellm-timeout": "0.001"}),
                (ask(text, stream=True, stream_timeout=0.001), {}), (ask(text, request_timeout=0.001), {})][k % 4]
    if kind < 7:
        fault = "error" if k % 2 else "drop"
        return (ask(f"AISIA-FAULT={fault} {text}", **({"num_retries": 0} if k % 4 < 2 else {})), {})
    fault = "repeat" if k % 2 else "stream_break"
    return ask(f"AISIA-FAULT={fault} {text}", stream=True), {}


class TenantB:
    """Tenant B's plain requests from `workers` threads, spread over `proxies`, until stopped."""

    def __init__(self, proxies, workers: int = 4):
        self.proxies, self.workers = proxies, workers
        self.results: list = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._lock = threading.Lock()

    def _run(self, w: int) -> None:
        k = 0
        while not self._stop.is_set():
            proxy = self.proxies[(w + k) % len(self.proxies)]
            try:
                r = post(proxy, TENANT_B, ask(f"Hello from tenant B, worker {w}, request {k}"))
                out = served_by(r) if r.status_code == 200 else f"{r.status_code}: {r.text[:200]}"
            except Exception as exc:  # noqa: BLE001 - a failed request is what the test counts
                out = f"error: {type(exc).__name__}: {exc}"
            with self._lock:
                self.results.append(out)
            k += 1

    def __enter__(self):
        self._futures = [self._pool.submit(self._run, w) for w in range(self.workers)]
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for f in self._futures:
            f.result(timeout=120)
        self._pool.shutdown()

    def count(self) -> int:
        with self._lock:
            return len(self.results)

    def served_some(self, n: int = 10, limit_s: float = 60.0) -> None:
        """Wait (bounded) until B has had `n` answers: B is being served when the flood begins."""
        deadline = time.monotonic() + limit_s
        while self.count() < n and time.monotonic() < deadline:
            time.sleep(0.05)
