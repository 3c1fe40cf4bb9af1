"""The test side of the proxy harness: a real LiteLLM proxy process and simulated upstreams.

One home for the proxy-starting code: `aisia_plugin.demo.proxy` (the demo uses it too); this
module only re-exports it under the names the test modules use. A proxy takes several seconds to
start, so a test module shares one (a module-scoped fixture) rather than starting one per test:

    @pytest.fixture(scope="module")
    def proxy(tmp_path_factory, upstreams):
        p = start_proxy({"model_list": [deployment("a", upstreams[0])], ...},
                        tmp_path_factory.mktemp("proxy"), env={"AISIA_POLICY": ...})
        yield p
        p.stop()
"""

from __future__ import annotations

import pytest

from aisia_plugin.demo.proxy import OFFLINE_ENV, Proxy, ProxyError, deployment, free_port, start_proxy
from aisia_plugin.demo.upstream import RunningUpstream, UpstreamSpec, parse_reply, start_upstreams, stop_upstreams

__all__ = ["OFFLINE_ENV", "Proxy", "ProxyError", "RunningUpstream", "UpstreamSpec", "chat", "deployment", "free_port",
           "parse_reply", "start_proxy", "start_upstreams", "stats", "stop_upstreams",
           "upstreams_fixture"]


def chat(client, model, text="Hello, how are you today?", **kw):
    """(served-by upstream name, response headers, completion) of one chat request through the
    `openai` client `client`."""
    raw = client.chat.completions.with_raw_response.create(model=model, messages=[{"role": "user", "content": text}],
                                                           **kw)
    completion = raw.parse()
    served, _ = parse_reply(completion.choices[0].message.content)
    return served, raw.headers, completion


def stats(admin) -> dict:
    """``GET /admin/bandit/stats`` through the admin's httpx client."""
    r = admin.get("/admin/bandit/stats")
    assert r.status_code == 200, r.text
    return r.json()


def upstreams_fixture(specs):
    """A module's ``upstreams`` fixture (``upstreams = upstreams_fixture(SPECS)``): the simulated
    upstreams of `specs` by name, started once for the module."""
    @pytest.fixture(scope="module")
    def upstreams():
        running = start_upstreams(specs)
        yield {u.name: u for u in running}
        stop_upstreams(running)

    return upstreams
