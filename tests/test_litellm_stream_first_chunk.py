"""Why pyproject.toml asks for litellm[proxy]>=1.108: a streamed request whose upstream answers
200 and then drops the connection before its first chunk is failed over to the next candidate.

From 1.108 LiteLLM's Router reads a stream's first chunk inside its retries, so that failure
reaches the plugin's failover like a 5xx does; up to 1.106.12 the proxy read it later, outside
them, and the client got a 500 with no other candidate tried (seen on 1.104.0-1.106.12 with
scripts/test_litellm_versions.sh). A real proxy process with the plugin, the real `openai`
client; the failing provider is a small HTTP server of this module, the healthy one a simulated
upstream of the harness."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fault_helpers import client_of, explain_rows, start_plugin_proxy, stats
from proxy_harness import deployment, start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`

POLICY = """\
version: 1
defaults: false
aliases:
  f/first-chunk:
    description: a stream that fails before its first chunk, then a healthy candidate
    strategy: cost
    candidates: {models: [nochunk-a, healthy-b]}
    failover: {attempts: 1}
"""


class _NoFirstChunk(BaseHTTPRequestHandler):
    """A provider that accepts a streamed request (200, an event stream) and then closes the
    connection without sending a single chunk."""

    protocol_version = "HTTP/1.1"
    calls = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            type(self).calls += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)


@pytest.fixture(scope="module")
def nochunk():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoFirstChunk)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def healthy():
    running = start_upstreams([{"name": "healthy-b", "input_cost_per_1m": 1.0, "output_cost_per_1m": 1.0}])
    yield running[0]
    stop_upstreams(running)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, nochunk, healthy):
    # nochunk-a is the cheaper: the cost strategy tries it first.
    models = [deployment("nochunk-a", nochunk, input_cost_per_token=1e-8, output_cost_per_token=1e-8),
              deployment("healthy-b", healthy)]
    p = start_plugin_proxy(tmp_path_factory.mktemp("first-chunk"), {}, POLICY, models=models)
    yield p
    p.stop()


def test_a_stream_dropped_before_its_first_chunk_is_failed_over_without_a_client_error(proxy):
    raw = client_of(proxy).chat.completions.with_raw_response.create(
        model="f/first-chunk", messages=[{"role": "user", "content": "hello"}], stream=True)
    text = "".join(ch.choices[0].delta.content or "" for ch in raw.parse() if ch.choices)
    assert "served-by=healthy-b" in text
    assert raw.headers["x-litellm-model-id"] == "healthy-b"
    rows = explain_rows(proxy, raw.headers["x-aisia-request-id"])
    assert [r["deployment_id"] for r in rows] == ["nochunk-a", "healthy-b"]
    assert rows[0]["outcome"]["success"] is False and rows[0]["outcome"]["failure"]["kind"] == "provider"
    assert rows[1]["outcome"]["success"] is True
    assert _NoFirstChunk.calls == 1
    assert stats(proxy)["nochunk-a"]["error_rate"] > 0
