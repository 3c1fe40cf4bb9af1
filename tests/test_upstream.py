"""The simulated upstreams behave as their control surface says, seen through the real `openai`
client and plain httpx over loopback HTTP."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys

import httpx
import openai
import pytest

from fault_helpers import wait_for
from proxy_harness import UpstreamSpec, parse_reply, start_upstreams, stop_upstreams

from aisia_plugin.demo.upstream import parse_spec

CODING = [{"role": "user", "content": "Écris une fonction Python qui trie une liste"}]
PLAIN = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def ups():
    running = start_upstreams([
        {"name": "alpha", "strengths": {"coding": 0.95}, "default_strength": 0.3, "seed": 7},
        UpstreamSpec(name="beta", model="beta-large", strengths={"coding": 0.2}, default_strength=0.6, seed=7),
    ])
    yield {r.name: r for r in running}
    stop_upstreams(running)


@pytest.fixture
def alpha(ups):
    ups["alpha"].reset()
    yield ups["alpha"]
    ups["alpha"].reset()


def client(up, timeout=5.0):
    return openai.OpenAI(base_url=up.base_url, api_key="sk-test", max_retries=0, timeout=timeout)


def post(up, path, body):
    return httpx.post(up.url + path, json=body, timeout=5)


def test_base_url_and_models(ups):
    beta = ups["beta"]
    assert beta.base_url == f"http://127.0.0.1:{beta.port}/v1"
    assert ups["alpha"].port != beta.port
    models = client(beta).models.list()
    assert [m.id for m in models.data] == ["beta-large"]


def test_reply_names_the_upstream_and_carries_usage(alpha):
    r = client(alpha).chat.completions.create(model="anything", messages=CODING)
    served, quality = parse_reply(r.choices[0].message.content)
    assert served == "alpha"
    assert 0.85 <= quality <= 1.0  # strength 0.95 in coding, moved by at most 0.1
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    stats = alpha.stats()
    assert stats["calls"] == 1 and stats["by_mode"] == {"ok": 1} and stats["by_domain"] == {"coding": 1}


def test_quality_follows_strength_and_is_deterministic(ups):
    a, b = ups["alpha"], ups["beta"]
    qa = [parse_reply(client(a).chat.completions.create(model="m", messages=CODING).choices[0].message.content)[1]
          for _ in range(2)]
    qb = parse_reply(client(b).chat.completions.create(model="m", messages=CODING).choices[0].message.content)[1]
    assert qa[0] == qa[1]
    assert qa[0] > qb  # alpha is the coding specialist
    q_plain_b = parse_reply(client(b).chat.completions.create(model="m", messages=PLAIN).choices[0].message.content)[1]
    assert q_plain_b > 0.45  # beta's default strength 0.6, not its coding strength 0.2


def test_stream_delivers_text_usage_and_done(alpha):
    chunks = list(client(alpha).chat.completions.create(model="m", messages=PLAIN, stream=True,
                                                        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert parse_reply(text)[0] == "alpha"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks)
    assert alpha.stats()["streams"] == 1
    with httpx.stream("POST", alpha.base_url + "/chat/completions",
                      json={"model": "m", "messages": PLAIN, "stream": True}, timeout=5) as r:
        lines = [line for line in r.iter_lines() if line]
    assert r.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)


@pytest.mark.parametrize("status, error", [(500, openai.InternalServerError), (503, openai.InternalServerError),
                                           (401, openai.AuthenticationError), (400, openai.BadRequestError)])
def test_error_mode_answers_the_status(alpha, status, error):
    alpha.control(mode="error", status=status)
    with pytest.raises(error) as exc:
        client(alpha).chat.completions.create(model="m", messages=PLAIN)
    assert exc.value.status_code == status
    with pytest.raises(error):
        list(client(alpha).chat.completions.create(model="m", messages=PLAIN, stream=True))
    alpha.control(mode="ok")
    assert parse_reply(client(alpha).chat.completions.create(model="m", messages=PLAIN)
                       .choices[0].message.content)[0] == "alpha"
    stats = alpha.stats()
    assert stats["calls"] == 3 and stats["by_mode"] == {"error": 2, "ok": 1}
    assert stats["failed"] == 2 and stats["succeeded"] == 1


def test_rate_limit_is_429_with_retry_after(alpha):
    r = post(alpha, "/_aisia/control", {"mode": "rate_limit", "retry_after": 7})
    assert r.status_code == 200 and r.json()["mode"] == "rate_limit"
    raw = httpx.post(alpha.base_url + "/chat/completions", json={"model": "m", "messages": PLAIN}, timeout=5)
    assert raw.status_code == 429 and raw.headers["retry-after"] == "7"
    assert raw.json()["error"]["type"] == "rate_limit_error"
    with pytest.raises(openai.RateLimitError) as exc:
        client(alpha).chat.completions.create(model="m", messages=PLAIN)
    assert exc.value.response.headers["retry-after"] == "7"


def test_timeout_mode_holds_the_request_until_released(alpha):
    alpha.control(mode="timeout")
    with pytest.raises(openai.APITimeoutError):
        client(alpha, timeout=0.3).chat.completions.create(model="m", messages=PLAIN)
    alpha.control(mode="ok")
    assert client(alpha).chat.completions.create(model="m", messages=PLAIN).choices[0].message.content
    assert alpha.stats()["by_mode"] == {"timeout": 1, "ok": 1}


def test_slow_mode_adds_latency_until_ok(alpha):
    alpha.control(mode="slow", latency_ms=3000)
    with pytest.raises(openai.APITimeoutError):
        client(alpha, timeout=0.3).chat.completions.create(model="m", messages=PLAIN)
    alpha.control(mode="ok")  # ok restores normal service, the added latency included
    assert alpha.stats()["latency_ms"] == 0
    assert client(alpha, timeout=2).chat.completions.create(model="m", messages=PLAIN).choices[0].message.content


def test_malformed_mode_returns_invalid_json(alpha):
    alpha.control(mode="malformed")
    raw = httpx.post(alpha.base_url + "/chat/completions", json={"model": "m", "messages": PLAIN}, timeout=5)
    assert raw.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        raw.json()
    with pytest.raises(ValueError):
        client(alpha).chat.completions.create(model="m", messages=PLAIN)
    with pytest.raises(ValueError):
        list(client(alpha).chat.completions.create(model="m", messages=PLAIN, stream=True))


def test_stream_break_drops_the_connection_midway(alpha):
    alpha.control(mode="stream_break")
    received = []
    with pytest.raises(httpx.RemoteProtocolError):
        for chunk in client(alpha).chat.completions.create(model="m", messages=PLAIN, stream=True):
            received.append(chunk)
    assert received, "the stream starts before it breaks"
    with pytest.raises(openai.APIConnectionError):
        client(alpha).chat.completions.create(model="m", messages=PLAIN)


def test_error_rate_is_seeded(ups):
    twins = start_upstreams([{"name": "t1", "error_rate": 0.5, "seed": 3}, {"name": "t2", "error_rate": 0.5, "seed": 3}])
    # One client for the 90 requests (each httpx.post builds a client and its TLS context: 30 ms).
    with httpx.Client(timeout=5) as http:
        def status(up):
            return http.post(up.base_url + "/chat/completions", json={"model": "m", "messages": PLAIN}).status_code

        try:
            outcomes = [[status(up) for _ in range(30)] for up in twins]
            assert outcomes[0] == outcomes[1]
            assert set(outcomes[0]) == {200, 500}
            assert twins[0].stats()["random_errors"] == outcomes[0].count(500)
            twins[0].reset()
            again = [status(twins[0]) for _ in range(30)]
            assert again == outcomes[0]  # reset restarts the draws
        finally:
            stop_upstreams(twins)


def test_control_rejects_bad_input_clearly(alpha):
    for body, word in [({"mode": "explode"}, "mode"), ({"status": 200}, "status"), ({"latency_ms": -1}, "latency_ms"),
                       ({"colour": "red"}, "colour"), ({"error_rate": 2}, "error_rate")]:
        r = post(alpha, "/_aisia/control", body)
        assert r.status_code == 400 and word in r.json()["error"]["message"]
    r = httpx.post(alpha.url + "/_aisia/control", content=b"{not json", timeout=5)
    assert r.status_code == 400
    assert httpx.post(alpha.base_url + "/chat/completions", json={"model": "m"}, timeout=5).status_code == 400
    assert alpha.stats()["mode"] == "ok"


def test_reset_restores_service_and_counters(alpha):
    alpha.control(mode="error", status=502)
    httpx.post(alpha.base_url + "/chat/completions", json={"model": "m", "messages": PLAIN}, timeout=5)
    assert httpx.get(alpha.url + "/_aisia/stats", timeout=5).json()["calls"] == 1
    r = post(alpha, "/_aisia/reset", {})
    assert r.status_code == 200 and r.json()["calls"] == 0 and r.json()["mode"] == "ok"
    assert httpx.post(alpha.base_url + "/chat/completions", json={"model": "m", "messages": PLAIN},
                      timeout=5).status_code == 200


def test_specs_are_checked():
    with pytest.raises(ValueError, match="unknown field"):
        UpstreamSpec.of({"name": "x", "latency": 3})
    with pytest.raises(ValueError, match="error_rate"):
        UpstreamSpec(name="x", error_rate=1.5)
    with pytest.raises(ValueError, match="name"):
        UpstreamSpec(name="bad name")
    with pytest.raises(ValueError, match="unique"):
        start_upstreams([{"name": "x"}, {"name": "x"}])
    spec = parse_spec("coder:latency_ms=40,error_rate=0.02,strength.coding=0.95,local=true")
    assert (spec.latency_ms, spec.error_rate, dict(spec.strengths), spec.local) == (40.0, 0.02, {"coding": 0.95}, True)
    assert parse_spec("x:echo=yes").echo and not parse_spec("x:echo=false").echo
    with pytest.raises(ValueError, match="unknown key"):
        parse_spec("x:speed=3")
    with pytest.raises(ValueError, match="true or false"):
        parse_spec("x:local=maybe")


@pytest.mark.proxy  # starts the upstreams' command line
def test_command_line_serves_until_stopped():
    proc = subprocess.Popen([sys.executable, "-m", "aisia_plugin.demo.upstream", "--json",
                             "--spec", "cli-one:latency_ms=1", "--spec", "cli-two"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        second = json.loads(proc.stdout.readline())
        assert (first["name"], second["name"]) == ("cli-one", "cli-two")
        r = openai.OpenAI(base_url=second["base_url"], api_key="k", max_retries=0, timeout=5) \
            .chat.completions.create(model="m", messages=PLAIN)
        assert parse_reply(r.choices[0].message.content)[0] == "cli-two"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    bad = subprocess.run([sys.executable, "-m", "aisia_plugin.demo.upstream", "--spec", "x:speed=1"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown key" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.proxy  # starts the upstreams' command line
def test_command_line_runs_the_demo_fleet():
    from aisia_plugin.demo.scenario import DEMO_UPSTREAMS

    proc = subprocess.Popen([sys.executable, "-m", "aisia_plugin.demo.upstream", "--json", "--demo"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [json.loads(proc.stdout.readline()) for _ in DEMO_UPSTREAMS]
        assert [x["name"] for x in lines] == [s.name for s in DEMO_UPSTREAMS]
        coder = next(x for x in lines if x["name"] == "coder")
        assert httpx.get(coder["base_url"] + "/models", timeout=5).json()["data"][0]["id"] == "coder-32b"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_client_that_hangs_up_is_counted_not_printed(alpha, capfd):
    """A slow answer written into a connection its client has reset (as LiteLLM does when its
    timeout fires) is a simulated fault's normal end: no traceback on stderr, one count."""
    alpha.control(mode="slow", latency_ms=300)
    body = json.dumps({"model": "m", "messages": PLAIN, "stream": True}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {alpha.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    conn = socket.create_connection((alpha.host, alpha.port), timeout=5)
    conn.sendall(head + body)
    wait_for(lambda: alpha.stats()["calls"] == 1, "the upstream to admit the request", limit_s=10, every_s=0.02)
    # Closed with a reset (no lingering): the answer, written after the latency, meets a dead socket.
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()
    wait_for(lambda: alpha.stats()["clients_gone"] == 1, "the hang-up to be counted", limit_s=10, every_s=0.02)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
    alpha.control(mode="ok")
    assert client(alpha).chat.completions.create(model="m", messages=PLAIN).choices  # still serving

