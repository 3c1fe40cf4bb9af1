"""`aisia demo`: a LiteLLM proxy with the plugin in front of simulated providers, sample traffic
and a provider made to fail, so that a new user sees `auto/*` routing and its adaptation
without any API key.

The pieces: the simulated fleet (`upstream.DEMO_UPSTREAMS`), the proxy config built from it
(`demo_config`), the sample traffic (`send_traffic`) and its tables (`traffic_table`,
`provider_table`), and `Demo`, which starts and stops them in order. HTTP only (urllib): no
LiteLLM import, no client library beyond the standard one."""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .proxy import Proxy, deployment, free_port, port_is_free
from .upstream import DEMO_UPSTREAMS, RunningUpstream, UpstreamSpec, parse_reply, start_upstreams, stop_upstreams

PLUGIN_CALLBACK = "aisia_plugin.litellm.plugin"
DEMO_POLICY = Path(__file__).resolve().parent / "demo-policy.yaml"
# A policy edit to evaluate on the demo's decision log (layered over DEMO_POLICY).
DEMO_EDIT = Path(__file__).resolve().parent / "demo-edit.yaml"
DEFAULT_PORT = 4000  # LiteLLM's usual port
DECISION_LOG = "decisions.jsonl"  # in the demo's folder (logging.decisions)
LOGGING_POLICY = "demo-logging.yaml"  # the policy layer that turns the decision log on

# The sample traffic: (alias, prompts); each request draws an entry (weighted) and a prompt.
SAMPLE_PROMPTS = {
    "coding": [
        "Write a Python function that merges two sorted lists and add unit tests",
        "Écris une fonction Python qui trie une liste de tuples par leur second élément",
        "Debug this JavaScript: console.log(arr.length) prints undefined inside my function",
        "Implement a REST API endpoint in Go that returns JSON",
        "Refactor this SQL query to use a join instead of a subquery",
    ],
    "math": [
        "What is the derivative of x^3 * sin(x)? Compute it and simplify the expression",
        "Calcule l'intégrale de x^2 entre 0 et 3",
    ],
    "translation": [
        "Translate into French: the meeting is moved to Thursday morning",
        "Traduis en anglais : le train part à huit heures",
    ],
    "general": [
        "Summarize the causes of the French Revolution in three sentences",
        "Give me three ideas for a team lunch on Friday",
        "Draft a polite email declining a meeting invitation",
    ],
}
TRAFFIC_MIX: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("auto/coding", ("coding",), 4),
    ("auto", ("coding", "math", "translation", "general"), 3),
    ("auto/cheap", ("general", "translation"), 1),
    ("auto/fast", ("general", "coding"), 1),
    ("auto/offline", ("general",), 1),
)


class DemoError(RuntimeError):
    """A problem the user can act on (the message says what); the command prints it and exits."""


def demo_specs(seed: int = 0) -> list[UpstreamSpec]:
    from dataclasses import replace

    return [replace(s, seed=s.seed + seed) for s in DEMO_UPSTREAMS]


def demo_config(upstreams: list[RunningUpstream]) -> dict:
    """The LiteLLM config of the demo: one deployment per simulated provider (the local one
    through LiteLLM's `hosted_vllm/` provider, which speaks the OpenAI protocol), the one
    callback line that enables the plugin, and LiteLLM's Prometheus integration (its `/metrics`,
    behind the master key, then shows the plugin's metrics too, as in a production proxy)."""
    model_list = []
    for u in upstreams:
        params = {"model": f"hosted_vllm/{u.spec.model_id}"} if u.spec.local else None
        model_list.append(deployment(u.name, u, litellm_params=params))
    return {
        "model_list": model_list,
        "litellm_settings": {"callbacks": [PLUGIN_CALLBACK, "prometheus"]},
        "router_settings": {"routing_strategy": "simple-shuffle"},
    }


# -- talking to the proxy --------------------------------------------------------------------

@dataclass
class Outcome:
    alias: str
    domain: str  # the sample's intended domain
    served_by: Optional[str] = None  # deployment id (x-litellm-model-id, else the reply text)
    status: int = 200
    error: str = ""
    headers: dict = field(default_factory=dict)
    quality: Optional[float] = None
    answer: Optional[str] = None  # the reply's text (a conversing user's chat client keeps it in its history)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.served_by is not None


def _http(method: str, url: str, key: Optional[str] = None, body=None, timeout: float = 60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in (exc.headers or {}).items()}, exc.read()


def list_aliases(proxy: Proxy) -> list[str]:
    status, _, body = _http("GET", proxy.base_url + "/models", proxy.master_key, timeout=10)
    if status != 200:
        return []
    ids = [m.get("id", "") for m in json.loads(body).get("data", [])]
    return sorted(i for i in ids if i == "auto" or i.startswith("auto/"))


def routing_page(proxy: Proxy) -> Optional[str]:
    """The URL of the plugin's routing page to open in a browser, if this plugin serves one."""
    try:
        status, _, _ = _http("GET", proxy.url + "/aisia/ui", proxy.master_key, timeout=10)
    except (urllib.error.URLError, OSError):
        return None
    return f"{proxy.url}/aisia/ui" if status == 200 else None  # signed in with a form: no key in the URL


def bandit_stats(proxy: Proxy):
    status, _, body = _http("GET", proxy.url + "/admin/bandit/stats", proxy.master_key, timeout=10)
    if status != 200:
        raise DemoError(f"GET /admin/bandit/stats answered {status}: {body[:200].decode(errors='replace')}")
    return json.loads(body)


def ask(proxy: Proxy, alias: str, prompt: str, domain: str = "", feedback: bool = False,
        messages: Optional[list] = None) -> Outcome:
    """One chat request through the proxy (`messages`, a conversation's history, else `prompt`
    alone); with `feedback`, the reply's simulated quality is sent back as delayed feedback
    (`POST /aisia/feedback`) when the proxy names the request: what no chat client does, so the
    demo does it only when asked (--feedback)."""
    body = {"model": alias, "messages": messages or [{"role": "user", "content": prompt}]}
    try:
        status, headers, raw = _http("POST", proxy.base_url + "/chat/completions", proxy.master_key, body)
    except (urllib.error.URLError, OSError) as exc:
        return Outcome(alias, domain, status=0, error=str(getattr(exc, "reason", exc)))
    if status != 200:
        try:
            message = json.loads(raw).get("error", {}).get("message", "")
        except (ValueError, AttributeError):
            message = raw[:200].decode(errors="replace")
        return Outcome(alias, domain, status=status, error=str(message), headers=headers)
    try:
        text = json.loads(raw)["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError):
        return Outcome(alias, domain, status=status, error="unreadable reply", headers=headers)
    served, quality = parse_reply(text)
    out = Outcome(alias, domain, served_by=headers.get("x-litellm-model-id") or served, headers=headers,
                  quality=quality, answer=text)
    request_id = headers.get("x-aisia-request-id")
    if feedback and request_id and quality is not None:
        _http("POST", proxy.url + "/aisia/feedback", proxy.master_key,
              {"request_id": request_id, "score": quality}, timeout=10)
    return out


def sample_requests(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """`n` (alias, domain, prompt) samples drawn from TRAFFIC_MIX, the same for the same seed."""
    rng = random.Random(seed)
    entries = [(alias, domains) for alias, domains, weight in TRAFFIC_MIX for _ in range(weight)]
    out = []
    for _ in range(n):
        alias, domains = rng.choice(entries)
        domain = rng.choice(domains)
        out.append((alias, domain, rng.choice(SAMPLE_PROMPTS[domain])))
    return out


def send_traffic(proxy: Proxy, n: int, seed: int = 0, concurrency: int = 4, feedback: bool = False,
                 on_done: Optional[Callable[[int], None]] = None) -> list[Outcome]:
    samples = sample_requests(n, seed)
    done = 0

    def one(sample):
        alias, domain, prompt = sample
        return ask(proxy, alias, prompt, domain, feedback)

    outcomes = []
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for o in pool.map(one, samples):
            outcomes.append(o)
            done += 1
            if on_done:
                on_done(done)
    return outcomes


# -- tables ----------------------------------------------------------------------------------

def _render(rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  " + "  ".join(cells).rstrip())
        if k == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def traffic_table(phases: list[tuple[str, list[Outcome]]]) -> str:
    """Where each alias's requests went, one column per phase ("before", "after"...); failed
    requests are counted on an "(error)" row."""
    counts: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for label, outcomes in phases:
        for o in outcomes:
            counts[o.alias][o.served_by if o.ok else "(error)"][label] += 1
    labels = [label for label, _ in phases]
    rows = [["alias", "served by", *labels]]
    order = [a for a, _, _ in TRAFFIC_MIX]
    for alias in sorted(counts, key=lambda a: (order.index(a) if a in order else len(order), a)):
        by_dep = counts[alias]
        first = True
        for dep in sorted(by_dep, key=lambda d: (d == "(error)", -sum(by_dep[d].values()), d)):
            rows.append([alias if first else "", dep, *(str(by_dep[dep][label]) for label in labels)])
            first = False
    return _render(rows, right=set(range(2, 2 + len(labels))))


def provider_table(phases: list[tuple[str, dict[str, dict]]]) -> str:
    """Requests each simulated provider received and failed, per phase (from its own counters,
    so failed attempts that the proxy retried elsewhere are visible too)."""
    labels = [label for label, _ in phases]
    names = list(phases[0][1]) if phases else []
    rows = [["provider", *(f"{label} calls/failed" for label in labels)]]
    for name in names:
        rows.append([name, *(f"{d[name]['calls']}/{d[name]['failed']}" for _, d in phases)])
    return _render(rows, right=set(range(1, 1 + len(labels))))


def learned_table(stats: dict, names: list[str]) -> str:
    """What the plugin has learned about each provider (`GET /admin/bandit/stats`)."""
    # Health and quality are learned apart (docs/quality.md): "calls" counts the outcomes learned
    # (the undiscounted count, health); "signals", "feedback" and "judge" how many pieces of
    # quality evidence each source gave; "prior" the quality its declared tier gives, and
    # "quality" the estimate the evidence moved it to.
    rows = [["deployment", "calls", "signals", "feedback", "judge", "prior", "quality", "mean reward", "error rate",
             "avg latency", "breaker"]]

    def num(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"

    for name in names:
        s = stats.get(name) or {}
        latency = s.get("avg_latency")
        quality = s.get("quality") or {}
        evidence = quality.get("evidence") or {}
        rows.append([name, num(s.get("count"), ".0f"), num(evidence.get("signal"), ".0f"),
                     num(evidence.get("feedback"), ".0f"), num(evidence.get("judge"), ".0f"),
                     num(quality.get("prior"), ".2f"), num(quality.get("estimate"), ".3f"),
                     num(s.get("mean_reward"), ".3f"), num(s.get("error_rate"), ".0%"),
                     f"{latency * 1000:.0f} ms" if isinstance(latency, (int, float)) and latency else "-",
                     str(s.get("breaker") or "-")])
    return _render(rows, right=set(range(1, 10)))


def upstream_table(stats: dict[str, dict]) -> str:
    """Each simulated provider's mode and counters since it started (or was reset)."""
    rows = [["provider", "mode", "calls", "succeeded", "failed"]]
    for name, s in stats.items():
        rows.append([name, s["mode"], str(s["calls"]), str(s["succeeded"]), str(s["failed"])])
    return _render(rows, right={2, 3, 4})


def stats_delta(before: dict[str, dict], after: dict[str, dict]) -> dict[str, dict]:
    return {n: {"calls": after[n]["calls"] - before[n]["calls"], "failed": after[n]["failed"] - before[n]["failed"]}
            for n in after}


# -- the demo's life cycle -------------------------------------------------------------------

class Demo:
    """The simulated providers and the proxy, started and stopped in order."""

    def __init__(self, port: Optional[int] = None, master_key: Optional[str] = None, workdir: Optional[str] = None,
                 seed: int = 0, timeout_s: float = 90):
        self.requested_port = port
        self.master_key = master_key or None
        self.seed = seed
        self.timeout_s = timeout_s
        self.keep_workdir = workdir is not None
        # Absolute: the proxy runs in this folder and is given its config by this path.
        self.workdir = Path(workdir).resolve() if workdir else Path(tempfile.mkdtemp(prefix="aisia-demo-"))
        self.upstreams: list[RunningUpstream] = []
        self.proxy: Optional[Proxy] = None
        self.port_note = ""

    def _port(self) -> int:
        if self.requested_port == 0:
            return free_port()
        if self.requested_port is not None:
            if not port_is_free(self.requested_port):
                raise DemoError(f"port {self.requested_port} on 127.0.0.1 is already in use; "
                                f"choose another with --port N (--port 0 picks a free one)")
            return self.requested_port
        if port_is_free(DEFAULT_PORT):
            return DEFAULT_PORT
        port = free_port()
        self.port_note = f"port {DEFAULT_PORT} is in use, so the proxy listens on {port}"
        return port

    def start(self, on_wait: Optional[Callable[[float], None]] = None) -> "Demo":
        import importlib.util

        try:
            found = importlib.util.find_spec(PLUGIN_CALLBACK.rsplit(".", 1)[0]) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise DemoError(f"the aisia LiteLLM plugin ({PLUGIN_CALLBACK}) is not installed in this environment; "
                            f"reinstall the package (pip install -e .)")
        try:
            self.upstreams = start_upstreams(demo_specs(self.seed))
        except OSError as exc:
            raise DemoError(str(exc)) from None
        # The proxy's port is chosen once the providers listen: they bind to port 0, and the
        # system may hand one of them the port a free-port probe has just released.
        try:
            port = self._port()
        except DemoError:
            stop_upstreams(self.upstreams)
            self.upstreams = []
            raise
        # The demo's policy, then a layer of its own that writes the decision log in its folder.
        self.workdir.mkdir(parents=True, exist_ok=True)
        logging_policy = self.workdir / LOGGING_POLICY
        logging_policy.write_text("# Written by `aisia demo`: the decision log of this run (aisia replay --logged).\n"
                                  "version: 1\nlogging:\n  decisions:\n    path: "
                                  + json.dumps(str(self.decision_log)) + "\n", encoding="utf-8")
        env = {"AISIA_POLICY": os.pathsep.join([str(DEMO_POLICY), str(logging_policy)])}
        self.proxy = Proxy(demo_config(self.upstreams), self.workdir, env=env, timeout_s=self.timeout_s, port=port,
                           master_key=self.master_key)
        self.proxy.start(on_wait=on_wait)
        self.master_key = self.proxy.master_key
        return self

    @property
    def decision_log(self) -> Path:
        return self.workdir / DECISION_LOG

    def replay_command(self) -> str:
        """The `aisia replay --logged` command that evaluates the demo's policy edit (DEMO_EDIT)
        on the traffic this demo logged."""
        aisia = Path(sys.executable).parent / "aisia"
        exe = str(aisia) if aisia.exists() else "aisia"
        return (f"{shlex.quote(exe)} replay --logged {shlex.quote(str(self.decision_log))} "
                f"--deployments {shlex.quote(str(self.workdir / 'litellm_config.yaml'))} --alias auto \\\n"
                f"        --policy {shlex.quote(str(DEMO_POLICY))} \\\n"
                f"        --compare {shlex.quote(str(DEMO_POLICY) + os.pathsep + str(DEMO_EDIT))}")

    def upstream(self, name: str) -> RunningUpstream:
        for u in self.upstreams:
            if u.name == name:
                return u
        raise DemoError(f"no simulated provider named {name!r}; the providers are: "
                        + ", ".join(u.name for u in self.upstreams or demo_specs()))

    def upstream_stats(self) -> dict[str, dict]:
        return {u.name: u.stats() for u in self.upstreams}

    def info(self) -> dict:
        p = self.proxy
        return {"url": p.url, "base_url": p.base_url, "master_key": p.master_key, "pid": p.pid,
                "config": str(p.config_path), "log": str(p.log_path), "policy": str(DEMO_POLICY),
                "decision_log": str(self.decision_log), "workdir_kept": self.keep_workdir,
                "stats_url": p.url + "/admin/bandit/stats", "metrics_url": p.url + "/metrics",
                "ui_url": p.url + "/aisia/ui",
                "upstreams": {u.name: {"base_url": u.base_url, "control": u.url + "/_aisia/control",
                                       "stats": u.url + "/_aisia/stats", "model": u.spec.model_id,
                                       "latency_ms": u.spec.latency_ms, "error_rate": u.spec.error_rate,
                                       "input_cost_per_1m": u.spec.input_cost_per_1m,
                                       "output_cost_per_1m": u.spec.output_cost_per_1m,
                                       "local": u.spec.local, "strengths": dict(u.spec.strengths)}
                              for u in self.upstreams}}

    def stop(self, remove_workdir: bool = True) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        stop_upstreams(self.upstreams)
        self.upstreams = []
        if remove_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
