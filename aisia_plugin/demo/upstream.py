"""Simulated OpenAI-compatible upstream providers on 127.0.0.1, for the demo, the tests and the
benchmarks (the LLM providers are the one thing outside this machine, so they are simulated).

Each upstream has a name, a base latency, an error rate, prices and a strength per domain. It
serves `POST /v1/chat/completions` (plain and `stream: true` server-sent events, with `usage`)
and `GET /v1/models`, and the same chat route on Azure's path
(`/openai/deployments/{deployment}/chat/completions`, for LiteLLM's `azure/` deployments); every
reply carries OpenAI's `service_tier` (LiteLLM's `groq/` provider refuses a reply without it).
The reply says which upstream served it and carries a quality signal that is a deterministic
function of the upstream's strength in the prompt's domain, the prompt and a seed. A control surface makes it misbehave on demand:

    POST /_aisia/control {"mode": "ok"|"error"|"timeout"|"slow"|"malformed"|"stream_break"|"rate_limit"|
                                   "drop"|"repeat",
                          "status": 500, "latency_ms": 0, "retry_after": 1, "error_rate": 0.0}
    GET  /_aisia/stats   {"calls": N, "by_mode": {...}, "succeeded": N, "failed": N, ...,
                          "clients_gone": N}  (clients that hung up before their answer was written)
    POST /_aisia/reset   (normal service, counters to zero, the random draws restarted)

A prompt may also ask for one fault for itself alone, as some inputs crash a self-hosted server:
`AISIA-FAULT=<mode>` in the last user message (`error` answers 500, `drop` closes the connection
without an answer, `repeat` streams one chunk 120 times, which trips LiteLLM's repeated-chunk
guard; any mode above).

Python: `start_upstreams(specs)` runs them in background threads of the calling process;
`python -m aisia_plugin.demo.upstream --spec NAME[:key=value,...]` runs them as a process.

Standard library only: the servers must start on a bare install and in a pytest fixture."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import re
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Optional

from ..numbers import clamp01

MODES = ("ok", "error", "timeout", "slow", "malformed", "stream_break", "rate_limit", "drop", "repeat")
# A prompt's own fault (see the module's docstring): what an input that crashes a server looks like.
_PROMPT_FAULT = re.compile(r"\bAISIA-FAULT=([a-z_]+)")
# "repeat": more identical chunks than LiteLLM's REPEATED_STREAMING_CHUNK_LIMIT (100).
_REPEATS = 120
CONTROL_KEYS = ("mode", "status", "latency_ms", "retry_after", "error_rate")
# A held ("timeout") request is released at the latest after this long, so that a client with
# no timeout of its own and a forgotten upstream cannot keep a thread forever.
_TIMEOUT_HOLD_CAP_S = 600.0
# "slow" without an explicit latency_ms adds this much.
_DEFAULT_SLOW_MS = 3000.0


@dataclass(frozen=True)
class UpstreamSpec:
    """What a simulated provider is like. Prices are USD per 1M tokens (they only matter to the
    LiteLLM deployment built from the spec, see `proxy.deployment`); strengths are in [0, 1] per
    domain name, `default_strength` for the others and for prompts without a domain."""

    name: str
    model: Optional[str] = None  # the model id it reports; defaults to the name
    latency_ms: float = 0.0
    # Added per output token of the answer: a long answer takes longer (a stream's, spread over its words).
    ms_per_token: float = 0.0
    # Added per prompt token before the answer: a long prompt takes longer to read.
    ms_per_prompt_token: float = 0.0
    error_rate: float = 0.0
    input_cost_per_1m: float = 1.0
    output_cost_per_1m: float = 2.0
    strengths: Mapping[str, float] = field(default_factory=dict)
    default_strength: float = 0.5
    reply_words: int = 12
    seed: int = 0
    port: int = 0  # 0 lets the system choose a free port
    local: bool = False  # a "local" model (the demo annotates it for auto/offline)
    echo: bool = False  # the reply ends with the last user message (privacy tests: a marker in answers)
    # Whether it returns its tokens' log-probabilities when a request asks (``logprobs: true``, as
    # vLLM and Ollama do): each token's is log(the answer's quality), so its confidence tracks how
    # good the answer is (local-first's tests and benchmark, docs/local-first.md).
    logprobs: bool = False
    # The spread of that confidence around the quality (a normal draw per answer, seeded by the
    # prompt): a model's certainty tells its right answers from its wrong ones imperfectly.
    logprob_noise: float = 0.0
    # A benchmark's own answers (benchmarks/conversation_bench.py): called with (upstream name, the
    # request's messages), returns the reply text instead of the quality line; Python only.
    responder: Optional[Callable[[str, list], str]] = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", self.name or ""):
            raise ValueError(f"upstream name {self.name!r}: use letters, digits, '.', '_' or '-'")
        if self.latency_ms < 0 or self.ms_per_token < 0 or self.ms_per_prompt_token < 0:
            raise ValueError(f"upstream {self.name}: latency_ms, ms_per_token and ms_per_prompt_token must be >= 0")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"upstream {self.name}: error_rate must be in [0, 1]")
        for domain, s in dict(self.strengths).items():
            if not 0.0 <= float(s) <= 1.0:
                raise ValueError(f"upstream {self.name}: strength of {domain} must be in [0, 1]")

    @property
    def model_id(self) -> str:
        return self.model or self.name

    def strength(self, domain: Optional[str]) -> float:
        if domain is None:
            return self.default_strength
        return float(self.strengths.get(domain, self.default_strength))

    @classmethod
    def of(cls, spec: "UpstreamSpec | Mapping[str, Any]") -> "UpstreamSpec":
        if isinstance(spec, UpstreamSpec):
            return spec
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ValueError(f"upstream spec: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return cls(**dict(spec))


# The demo's six simulated providers (`aisia demo`, and `--demo` below: defined here so that this
# module needs nothing from the scenario that starts it). Their ids match the annotations of
# demo-policy.yaml; prices are USD per 1M tokens (input, output); strengths drive the quality
# signal in their replies.
DEMO_UPSTREAMS: tuple[UpstreamSpec, ...] = (
    UpstreamSpec("frontier", model="frontier-large", latency_ms=180, error_rate=0.01,
                 input_cost_per_1m=5.0, output_cost_per_1m=15.0, default_strength=0.85,
                 strengths={"coding": 0.8, "math": 0.93, "reasoning": 0.93, "translation": 0.85}, seed=1),
    UpstreamSpec("coder", model="coder-32b", latency_ms=70, error_rate=0.01,
                 input_cost_per_1m=0.8, output_cost_per_1m=2.4, default_strength=0.45,
                 strengths={"coding": 0.97}, seed=2),
    UpstreamSpec("swift", model="swift-mini", latency_ms=12, error_rate=0.01,
                 input_cost_per_1m=0.15, output_cost_per_1m=0.6, default_strength=0.6,
                 strengths={"coding": 0.55, "math": 0.5}, seed=3),
    UpstreamSpec("budget", model="budget-7b", latency_ms=220, error_rate=0.04,
                 input_cost_per_1m=0.02, output_cost_per_1m=0.05, default_strength=0.4, seed=4),
    UpstreamSpec("flaky", model="flaky-70b", latency_ms=50, error_rate=0.2,
                 input_cost_per_1m=0.6, output_cost_per_1m=1.8, default_strength=0.75,
                 strengths={"translation": 0.9}, seed=5),
    UpstreamSpec("local", model="llama-3.2-3b", latency_ms=110, error_rate=0.0,
                 input_cost_per_1m=0.0, output_cost_per_1m=0.0, default_strength=0.35, local=True, seed=6),
)


def _domain_of(text: str) -> Optional[str]:
    # The same detection the router uses, so that "strong in coding" means the same thing to the
    # simulated provider and to the policy.
    from ..policy import detect_domain

    return detect_domain(text)


def _message_text(messages) -> str:
    parts = []
    for m in messages or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content parts
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _last_user_text(messages) -> str:
    for m in reversed(list(messages or ())):
        if isinstance(m, dict) and m.get("role") == "user":
            return _message_text([m])
    return _message_text(messages)


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def usage_of(messages, text: str) -> dict:
    """The ``usage`` a simulated upstream reports for answering `messages` with `text`: a token
    per word (what LiteLLM prices, and what a benchmark prices a call by)."""
    prompt_tokens, completion_tokens = _tokens(_message_text(messages)), _tokens(text)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


# The words of a simulated answer after its header: drawn per (seed, upstream, prompt), so that two
# answers to different prompts differ as real ones do (a conversation's repeated-answer signal
# compares an answer with the previous one, docs/signals.md) and the same prompt gets the same one.
_ANSWER_WORDS = ("answer", "result", "because", "first", "then", "value", "function", "step", "note", "here",
                 "example", "so", "we", "get", "list", "sum", "check", "case", "test", "return", "loop", "date",
                 "order", "rule", "term", "point", "line", "table", "query", "index", "field", "range", "option",
                 "reason", "source", "number", "method", "detail", "summary", "version")


def answer_words(spec: UpstreamSpec, prompt: str, n: int) -> str:
    rng = random.Random(f"{spec.seed}:{spec.name}:{prompt}:words")
    return " ".join(rng.choice(_ANSWER_WORDS) for _ in range(max(0, n)))


def quality_of(spec: UpstreamSpec, prompt: str, domain: Optional[str]) -> float:
    """The simulated answer quality: the upstream's strength in the domain, moved by at most
    0.1 by a draw that depends only on (seed, upstream, prompt)."""
    noise = random.Random(f"{spec.seed}:{spec.name}:{prompt}").uniform(-0.1, 0.1)
    return round(clamp01(spec.strength(domain) + noise), 3)


def token_confidence(spec: UpstreamSpec, prompt: str, quality: float) -> float:
    """The probability each token of an answer is reported with (``logprobs``): the answer's
    quality moved by a normal draw of sd ``logprob_noise`` that depends only on (seed, upstream,
    prompt), within [0.001, 1]."""
    if spec.logprob_noise <= 0.0:
        return quality
    draw = random.Random(f"{spec.seed}:{spec.name}:{prompt}:logprob").gauss(0.0, spec.logprob_noise)
    return min(1.0, max(0.001, quality + draw))


# Azure's chat route: LiteLLM's `azure/NAME` calls `{api_base}/openai/deployments/NAME/chat/completions`.
_AZURE_CHAT = re.compile(r"/openai/deployments/[^/]+/chat/completions")
# What OpenAI reports as the tier that served the request; "default" is priced at base rates.
SERVICE_TIER = "default"

_QUALITY_RE = re.compile(r"\bquality=([01](?:\.\d+)?)\b")
_SERVED_RE = re.compile(r"\bserved-by=([A-Za-z0-9._-]+)")


def parse_reply(text: str) -> tuple[Optional[str], Optional[float]]:
    """(upstream name, quality) read back from a simulated reply (None, None if not one)."""
    served = _SERVED_RE.search(text or "")
    q = _QUALITY_RE.search(text or "")
    return (served.group(1) if served else None, float(q.group(1)) if q else None)


class _State:
    """Mutable state of one upstream: its mode and counters, behind one lock."""

    def __init__(self, spec: UpstreamSpec):
        self.spec = spec
        self.lock = threading.Lock()
        self.release = threading.Event()  # set: held "timeout" requests return
        self._reset_locked()

    def _reset_locked(self):
        self.mode = "ok"
        self.status = 500
        self.latency_ms = 0.0  # extra latency (slow mode) or added to every reply when set
        self.retry_after = 1.0
        self.error_rate = self.spec.error_rate
        self.rng = random.Random(self.spec.seed)
        self.calls = 0
        self.by_mode: dict[str, int] = {}
        self.succeeded = 0
        self.failed = 0
        self.streams = 0
        self.random_errors = 0
        self.by_domain: dict[str, int] = {}
        self.clients_gone = 0  # requests whose client hung up before the answer was written

    def reset(self):
        with self.lock:
            self.release.set()
            self._reset_locked()
            self.release = threading.Event()

    def control(self, settings: Mapping[str, Any]) -> dict:
        unknown = sorted(set(settings) - set(CONTROL_KEYS))
        if unknown:
            raise ValueError(f"unknown control field(s) {', '.join(unknown)}; known: {', '.join(CONTROL_KEYS)}")
        mode = settings.get("mode")
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        status = settings.get("status")
        if status is not None and (not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599):
            raise ValueError("status must be an integer HTTP error status (400-599)")
        for key in ("latency_ms", "retry_after"):
            v = settings.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
                raise ValueError(f"{key} must be a number >= 0")
        er = settings.get("error_rate")
        if er is not None and (isinstance(er, bool) or not isinstance(er, (int, float)) or not 0 <= er <= 1):
            raise ValueError("error_rate must be a number in [0, 1]")
        with self.lock:
            if mode is not None:
                if self.mode == "timeout" and mode != "timeout":
                    self.release.set()
                    self.release = threading.Event()
                self.mode = mode
                if mode == "ok" and "latency_ms" not in settings:
                    self.latency_ms = 0.0
                if mode == "slow" and "latency_ms" not in settings:
                    self.latency_ms = _DEFAULT_SLOW_MS
            if status is not None:
                self.status = status
            if settings.get("latency_ms") is not None:
                self.latency_ms = float(settings["latency_ms"])
            if settings.get("retry_after") is not None:
                self.retry_after = float(settings["retry_after"])
            if er is not None:
                self.error_rate = float(er)
            return self._settings_locked()

    def _settings_locked(self) -> dict:
        return {"mode": self.mode, "status": self.status, "latency_ms": self.latency_ms,
                "retry_after": self.retry_after, "error_rate": self.error_rate}

    def stats(self) -> dict:
        with self.lock:
            return {"name": self.spec.name, "model": self.spec.model_id, "calls": self.calls,
                    "by_mode": dict(self.by_mode), "succeeded": self.succeeded, "failed": self.failed,
                    "random_errors": self.random_errors, "streams": self.streams, "clients_gone": self.clients_gone,
                    "by_domain": dict(self.by_domain), **self._settings_locked()}

    def client_gone(self) -> None:
        with self.lock:
            self.clients_gone += 1

    def admit(self, stream: bool, domain: Optional[str]) -> tuple[str, dict]:
        """Count one chat request and decide how it is served: (effective mode, settings)."""
        with self.lock:
            self.calls += 1
            mode = self.mode
            if mode in ("ok", "slow") and self.error_rate > 0 and self.rng.random() < self.error_rate:
                mode = "random_error"
                self.random_errors += 1
            self.by_mode[mode] = self.by_mode.get(mode, 0) + 1
            key = domain or "general"
            self.by_domain[key] = self.by_domain.get(key, 0) + 1
            if stream:
                self.streams += 1
            if mode in ("ok", "slow"):
                self.succeeded += 1
            else:
                self.failed += 1
            return mode, {**self._settings_locked(), "release": self.release}


def _error_body(message: str, kind: str, code: Optional[str] = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: LiteLLM pools its upstream connections
    # Headers and body are separate writes; with Nagle's algorithm the body would wait for the
    # client's delayed ACK, which would dominate an instant upstream's latency.
    disable_nagle_algorithm = True
    server_version = "aisia-fake-upstream/1"
    state: _State  # set on the per-upstream subclass

    def log_message(self, format, *args):  # quiet: the proxy's log is the one to read
        pass

    # -- plumbing -----------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str = "application/json", headers=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode())

    def _read_json(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        return json.loads(raw)

    def _path(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        if _AZURE_CHAT.fullmatch(path):
            return "/chat/completions"
        return path[3:] if path.startswith("/v1/") else path

    # -- routes -------------------------------------------------------------------------------
    def do_GET(self):
        path = self._path()
        if path == "/models":
            spec = self.state.spec
            self._json(200, {"object": "list", "data": [
                {"id": spec.model_id, "object": "model", "created": 0, "owned_by": spec.name}]})
        elif path == "/_aisia/stats":
            self._json(200, self.state.stats())
        elif path in ("", "/health"):
            self._json(200, {"status": "ok", "name": self.state.spec.name})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self):
        path = self._path()
        try:
            body = self._read_json()
        except (ValueError, UnicodeDecodeError):
            self._send(400, _error_body("request body is not JSON", "invalid_request_error"))
            return
        if path == "/_aisia/control":
            try:
                if not isinstance(body, dict):
                    raise ValueError("control body must be a JSON object")
                self._json(200, self.state.control(body))
            except ValueError as exc:
                self._send(400, _error_body(str(exc), "invalid_request_error"))
        elif path == "/_aisia/reset":
            self.state.reset()
            self._json(200, self.state.stats())
        elif path == "/chat/completions":
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                self._send(400, _error_body("'messages' is required", "invalid_request_error"))
                return
            self._chat(body)
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    # -- chat ---------------------------------------------------------------------------------
    def _chat(self, body: dict) -> None:
        spec = self.state.spec
        messages = body["messages"]
        prompt = _last_user_text(messages)
        domain = _domain_of(prompt) if prompt else None
        stream = bool(body.get("stream"))
        mode, cfg = self.state.admit(stream, domain)
        asked = _PROMPT_FAULT.search(prompt or "")
        if asked is not None and asked.group(1) in MODES:
            mode = asked.group(1)
        if self._fault(mode, cfg):
            return
        quality = quality_of(spec, prompt, domain)
        if spec.responder is not None:
            text = spec.responder(spec.name, messages)
        else:
            text = (f"served-by={spec.name} model={spec.model_id} domain={domain or 'general'} quality={quality:.3f} "
                    + answer_words(spec, prompt, spec.reply_words - 5))
        if spec.echo:
            text += " echo: " + prompt
        usage = usage_of(messages, text)
        if spec.ms_per_prompt_token:
            time.sleep(spec.ms_per_prompt_token * usage["prompt_tokens"] / 1000.0)
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        if mode == "malformed":
            self._malformed(cid, stream)
        elif not stream:
            if spec.ms_per_token:
                time.sleep(spec.ms_per_token * usage["completion_tokens"] / 1000.0)
            completion = self._completion(cid, created, text, usage)
            if mode == "stream_break":
                self._cut_short(json.dumps(completion).encode())
                return
            if spec.logprobs and body.get("logprobs"):
                lp = math.log(max(token_confidence(spec, prompt, quality), 1e-6))
                completion["choices"][0]["logprobs"] = {"content": [
                    {"token": w, "logprob": lp, "bytes": list(w.encode()), "top_logprobs": []} for w in text.split(" ")]}
            self._json(200, completion)
        else:
            self._streamed(mode, body, cid, created, text, usage)

    def _fault(self, mode: str, cfg: dict) -> bool:
        """The simulated fault of `mode`, answered (True), or nothing to do but the latency (False)."""
        spec = self.state.spec
        if mode == "drop":
            self._drop()  # no status line at all: the server went away on this input
            return True
        if mode == "timeout":
            cfg["release"].wait(_TIMEOUT_HOLD_CAP_S)
            self.close_connection = True
            return True  # no response at all: the client's own timeout fires
        delay_ms = spec.latency_ms + cfg["latency_ms"]
        if delay_ms > 0:
            time.sleep(delay_ms / 1000.0)
        if mode == "error" or mode == "random_error":
            status = cfg["status"] if mode == "error" else 500
            self._send(status, _error_body(f"simulated failure of upstream {spec.name} (status {status})",
                                           "server_error" if status >= 500 else "invalid_request_error"))
            return True
        if mode == "rate_limit":
            ra = cfg["retry_after"]
            self._send(429, _error_body(f"simulated rate limit of upstream {spec.name}", "rate_limit_error",
                                        "rate_limit_exceeded"),
                       headers={"Retry-After": f"{ra:g}", "x-ratelimit-remaining-requests": "0"})
            return True
        return False

    def _malformed(self, cid: str, stream: bool) -> None:
        """An answer cut inside its JSON, as a stream or whole."""
        if stream:
            self._stream_start()
            self._chunk(b"data: {\"id\": \"" + cid.encode() + b"\", \"choices\": [{\"delta\": {\"content\": \n\n")
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        else:
            self._send(200, b'{"id": "' + cid.encode() + b'", "object": "chat.completion", "choices": [{"message": ')

    def _cut_short(self, full: bytes) -> None:
        """Headers that promise the whole answer, half of it, then the connection drops."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(full)))
        self.end_headers()
        self.wfile.write(full[: len(full) // 2])
        self.wfile.flush()
        self._drop()

    def _streamed(self, mode: str, body: dict, cid: str, created: int, text: str, usage: dict) -> None:
        """The answer as server-sent events, word by word (a `repeat` fault: one word again and
        again; `stream_break`: dropped after two words)."""
        self._stream_start()
        words = text.split(" ")
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": self.state.spec.model_id,
                "service_tier": SERVICE_TIER}
        self._event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
        if mode == "repeat":
            words = ["again"] * _REPEATS
        pause = self.state.spec.ms_per_token * usage["completion_tokens"] / 1000.0 / max(len(words), 1)
        for i, w in enumerate(words):
            if pause:
                time.sleep(pause)
            if mode == "stream_break" and i == 2:
                self._drop()  # mid-stream: no final chunk, no [DONE], no terminating chunk
                return
            self._event({**base, "choices": [{"index": 0, "delta": {"content": (w if i == 0 else " " + w)},
                                              "finish_reason": None}]})
        self._event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage})
        opts = body.get("stream_options") or {}
        if isinstance(opts, dict) and opts.get("include_usage"):
            self._event({**base, "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _completion(self, cid, created, text, usage) -> dict:
        return {"id": cid, "object": "chat.completion", "created": created, "model": self.state.spec.model_id,
                "service_tier": SERVICE_TIER, "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": usage}

    def _stream_start(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, obj):
        self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def handle_error(self, request, client_address) -> None:
        """A request that failed while being served. A client that hung up (its own timeout
        fired during a slow or held answer, or it dropped a stream) is expected of a simulated
        fault: counted (``clients_gone`` in the stats), not printed. Anything else is said in one
        line on stderr rather than socketserver's traceback."""
        exc = sys.exc_info()[1]
        state = self.RequestHandlerClass.state
        if isinstance(exc, (ConnectionError, TimeoutError)):
            state.client_gone()
            return
        host, port = client_address[:2]
        sys.stderr.write(f"upstream {state.spec.name}: a request from {host}:{port} failed: "
                         f"{type(exc).__name__}: {exc}\n")


class RunningUpstream:
    """One simulated upstream serving in a background thread of this process."""

    def __init__(self, spec: UpstreamSpec, host: str = "127.0.0.1"):
        self.spec = spec
        self._state = _State(spec)
        handler = type(f"Handler_{spec.name}", (_Handler,), {"state": self._state})
        try:
            self._server = _Server((host, spec.port), handler)
        except OSError as exc:
            raise OSError(f"upstream {spec.name}: cannot listen on {host}:{spec.port}: {exc.strerror or exc}") from None
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"upstream-{spec.name}", daemon=True)
        self._thread.start()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def control(self, **settings) -> dict:
        """Same fields as `POST /_aisia/control`; returns the settings now in force."""
        return self._state.control({k: v for k, v in settings.items()})

    def stats(self) -> dict:
        return self._state.stats()

    @contextlib.contextmanager
    def broken(self, **settings):
        """The upstream in a fault mode (``control`` settings, e.g. ``mode="error", status=500``)
        for the ``with`` block, then healthy again whatever happened in it."""
        self.control(**settings)
        try:
            yield self
        finally:
            self.control(mode="ok")

    def reset(self) -> dict:
        self._state.reset()
        return self._state.stats()

    def stop(self) -> None:
        self._state.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __repr__(self):
        return f"RunningUpstream({self.name!r}, {self.base_url})"


def start_upstreams(specs) -> list[RunningUpstream]:
    """Start one upstream per spec (an `UpstreamSpec` or a mapping of its fields); on a failure
    the ones already started are stopped again."""
    parsed = [UpstreamSpec.of(s) for s in specs]
    names = [s.name for s in parsed]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"upstream names must be unique: {', '.join(dup)}")
    running: list[RunningUpstream] = []
    try:
        for spec in parsed:
            running.append(RunningUpstream(spec))
    except BaseException:
        for r in running:
            r.stop()
        raise
    return running


def stop_upstreams(running) -> None:
    for r in running:
        r.stop()


# -- command line -----------------------------------------------------------------------------

def parse_spec(text: str) -> UpstreamSpec:
    """`NAME[:key=value,...]`, e.g. `coder:latency_ms=40,error_rate=0.02,strength.coding=0.95`."""
    name, _, rest = text.partition(":")
    kw: dict[str, Any] = {"name": name}
    strengths: dict[str, float] = {}
    types = {f.name: f.type for f in fields(UpstreamSpec)}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ValueError(f"spec {text!r}: {item!r} is not key=value")
        try:
            if key.startswith("strength."):
                strengths[key[len("strength."):]] = float(value)
            elif key not in types or key in ("name", "strengths", "responder"):
                raise ValueError(f"unknown key {key!r}")
            elif key == "model":
                kw[key] = value
            elif types[key] in (bool, "bool"):
                if value.strip().lower() not in ("1", "true", "yes", "0", "false", "no"):
                    raise ValueError(f"{key} must be true or false")
                kw[key] = value.strip().lower() in ("1", "true", "yes")
            elif key in ("seed", "port", "reply_words"):
                kw[key] = int(value)
            else:
                kw[key] = float(value)
        except ValueError as exc:
            raise ValueError(f"spec {text!r}: {exc}") from None
    if strengths:
        kw["strengths"] = strengths
    return UpstreamSpec(**kw)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m aisia_plugin.demo.upstream",
                                description="Run simulated OpenAI-compatible upstreams on 127.0.0.1 until Ctrl-C.")
    p.add_argument("--spec", action="append", default=[], metavar="NAME[:key=value,...]",
                   help="one upstream (repeatable); keys: model, latency_ms, ms_per_token, ms_per_prompt_token, error_rate, input_cost_per_1m, "
                        "output_cost_per_1m, default_strength, strength.DOMAIN, reply_words, seed, port, local, echo")
    p.add_argument("--demo", action="store_true", help="run the demo's simulated providers")
    p.add_argument("--json", action="store_true", help="print one JSON object per upstream instead of a table")
    args = p.parse_args(argv)
    try:
        specs = [parse_spec(s) for s in args.spec]
        if args.demo or not specs:
            specs = list(DEMO_UPSTREAMS) + specs
        running = start_upstreams(specs)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for r in running:
        if args.json:
            print(json.dumps({"name": r.name, "port": r.port, "base_url": r.base_url}), flush=True)
        else:
            print(f"{r.name:<14} {r.base_url}   control: POST {r.url}/_aisia/control", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop_upstreams(running)
    return 0


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy's: the demo's specs are instances of
    # the imported module's UpstreamSpec.
    from aisia_plugin.demo.upstream import main as _main

    sys.exit(_main())
