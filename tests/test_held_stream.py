"""Through a real LiteLLM proxy: a stream its client holds back teaches no latency
(docs/design.md#a-stream-its-client-holds; aisia_plugin/litellm/streams.py, answer_time.held_by_client).

One deployment behind an alias of one candidate; its answers are streamed, 3,000 words. The client
reads with a 4 KiB socket receive buffer, so the buffers between the proxy and the client fill
after some hundreds of KiB: read at once, the stream passes; read with a pause after its first
bytes, the proxy waits on the client for the rest of the pause. Without the plugin's timing of the
provider's side, that wait was the stream's latency, learned (scaled by the length cap: a client
stretches it as far as the proxy's timeout)."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from fault_helpers import admin_get, explain_rows, start_plugin_proxy
from proxy_harness import start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy

ALIAS = "t/held"
POLICY = f"""\
version: 1
defaults: false
aliases:
  {ALIAS}:
    description: one deployment
    strategy: ucb1
    candidates: {{models: [held-up]}}
"""
WORDS, WORD_BYTES = 800, 8000  # 6.4 MB in 800 chunks: past the buffers, little work for the proxy
PAUSE_S = 8.0
RECEIVE_BUFFER = 65536


def words(name: str, messages: list) -> str:
    # (Words that differ: LiteLLM stops a stream that repeats one chunk.)
    return " ".join(f"w{k}" + "x" * WORD_BYTES for k in range(WORDS))


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    running = start_upstreams([{"name": "held-up", "latency_ms": 20, "responder": words}])
    p = start_plugin_proxy(tmp_path_factory.mktemp("held"), {u.name: u for u in running}, POLICY)
    try:
        yield p
    finally:
        p.stop()
        stop_upstreams(running)


def read_stream(proxy, pause_s: float) -> tuple[str, int, float]:
    """(request id, bytes, the client's seconds) of one streamed answer read through a 4 KiB
    receive buffer, with a pause of `pause_s` after its first bytes."""
    transport = httpx.HTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)])
    body = {"model": ALIAS, "messages": [{"role": "user", "content": "Count for me."}], "stream": True}
    started, size = time.monotonic(), 0
    with httpx.Client(transport=transport, timeout=120) as client:
        with client.stream("POST", proxy.base_url + "/chat/completions", json=body, headers=proxy.headers) as r:
            assert r.status_code == 200, r.read()[:300]
            for k, chunk in enumerate(r.iter_raw(4096)):
                size += len(chunk)
                if k == 0 and pause_s:
                    time.sleep(pause_s)
            rid = r.headers["x-aisia-request-id"]
    return rid, size, time.monotonic() - started


def learned_latency(proxy) -> float:
    return admin_get(proxy, "/admin/bandit/stats")["held-up"]["avg_latency"]


def outcome_of(proxy, rid: str) -> dict:
    rows = explain_rows(proxy, rid)
    assert rows and rows[-1]["outcome"], rows
    return rows[-1]["outcome"]


def test_a_stream_its_client_holds_back_teaches_no_latency_and_one_read_at_once_does(proxy):
    read_stream(proxy, 0.0)  # the connections set up, the deployment measured once
    rid, size, _ = read_stream(proxy, 0.0)
    at_once = outcome_of(proxy, rid)
    assert size > 6_000_000  # past the buffers (a few MB over loopback: benchmarks/results/slow_reader.md)
    assert at_once["stream"] and at_once["latency_learned"] is True
    assert at_once["client_held_s"] < 0.25 * at_once["latency_s"], at_once
    before = learned_latency(proxy)

    rid, size, client_s = read_stream(proxy, PAUSE_S)
    held = outcome_of(proxy, rid)
    print(f"read at once: {at_once['latency_s']:.2f} s, held {at_once['client_held_s']:.2f} s; paused "
          f"{PAUSE_S:g} s: {held['latency_s']:.2f} s, held {held['client_held_s']:.2f} s (client {client_s:.1f} s); "
          f"learned latency {before:.3f} s -> {learned_latency(proxy):.3f} s")
    # The pause made the stream's time: most of it the proxy waited on the client.
    assert held["latency_s"] > PAUSE_S * 0.6 and held["client_held_s"] > 0.5 * held["latency_s"], held
    assert held["latency_learned"] is False
    # Not learned: the deployment's latency is where the stream read at once left it.
    assert learned_latency(proxy) == before
