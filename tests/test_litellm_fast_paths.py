"""The request path's shortcuts: the logging events of requests no alias routed (the plugin does
not read their outcome), the header names' cache and the key hashes' cache against computing them
each time, and a Router used alone that never imports the proxy."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

from aisia_plugin.litellm import callback, events  # noqa: E402
from aisia_plugin.litellm.runtime import one_line  # noqa: E402


def test_stamped_request_ids_are_fresh_128_bit_hex_ids():
    stamped = [{} for _ in range(200)]
    ids = [events.stamp_request_id(d) for d in stamped]
    assert len(set(ids)) == 200
    assert all(len(i) == 32 and int(i, 16).bit_length() <= 128 and i == i.lower() for i in ids)
    assert [d["metadata"][events.REQUEST_ID_KEY] for d in stamped] == ids
    # Random, not a counter: the bits vary across the whole id (a uuid4's hex fixes 6 of them).
    assert len({i[12] for i in ids}) > 4 and len({i[16] for i in ids}) > 4


def test_an_alias_request_the_plugin_refuses_before_any_deployment():
    """An API an alias does not route (LiteLLM's call type, as a string or its enum) and messages
    LiteLLM would refuse inside the provider call: the caller's 400, with the field at fault."""
    from enum import Enum

    from aisia_plugin.litellm.checks import request_problem

    class CallType(Enum):
        aembedding = "aembedding"

    ok = {"messages": [{"role": "user", "content": "hi"}]}
    assert request_problem("auto", "acompletion", ok) is None
    assert request_problem("auto", "aresponses", {"input": "hi"}) is None
    for kind in ("aembedding", CallType.aembedding, "image_generation", "arerank"):
        found = request_problem("auto/x", kind, ok)
        assert (found.reason, found.param) == ("unsupported_api", "model")
        assert found.message.startswith("alias 'auto/x' routes chat, completion and responses requests; a ")
    found = request_problem("auto", "acompletion", {"messages": [{"role": "user", "content": "hi"}, "hi"]})
    assert (found.reason, found.param) == ("invalid_request", "messages[1]")


def test_message_problem_reads_dicts_and_other_mappings_alike():
    from types import MappingProxyType

    from aisia_plugin.litellm.checks import message_problem

    ok = {"role": "user", "content": "hi"}
    assert message_problem([ok, MappingProxyType(ok)]) is None
    assert message_problem([ok, "hi"])[0] == "messages[1]"
    assert message_problem([ok, ["role", "user"]])[0] == "messages[1]"
    bad = [{"type": "text", "text": "a"}, {"type": "nope"}]
    assert message_problem([{"role": "user", "content": bad}])[0] == "messages[0].content[1].type"
    assert message_problem([MappingProxyType({"role": "user", "content": bad})])[0] == "messages[0].content[1].type"


class _Runtime:
    """Only what the event hooks read: the calls in flight (one, of another request)."""

    def __init__(self):
        self.looked_up = []
        self.calls = {"another-alias-request": None}

    def call_for(self, request_id, alias, create=False):
        self.looked_up.append(request_id)
        return None


def test_events_of_requests_no_alias_routed_are_not_read(monkeypatch):
    plugin = callback.AisiaPlugin.__new__(callback.AisiaPlugin)
    plugin.runtime = _Runtime()

    def unexpected(*_args, **_kwargs):
        raise AssertionError("the outcome of a request no alias routed was built")

    monkeypatch.setattr(events, "success", unexpected)
    monkeypatch.setattr(events, "failure", unexpected)
    # A plain model's request carries no id of the plugin's: not even looked up.
    kwargs = {"litellm_call_id": "plain-1", "litellm_params": {"model_info": {"id": "dep-1"}, "metadata": {}}}
    asyncio.run(plugin.async_log_success_event(kwargs, None, 0.0, 0.1))
    asyncio.run(plugin.async_log_failure_event(kwargs, None, 0.0, 0.1))
    assert plugin.runtime.looked_up == []
    # An alias request no longer in flight: one lookup each, nothing built.
    kwargs["litellm_params"]["metadata"][events.REQUEST_ID_KEY] = "gone-1"
    asyncio.run(plugin.async_log_success_event(kwargs, None, 0.0, 0.1))
    asyncio.run(plugin.async_log_failure_event(kwargs, None, 0.0, 0.1))
    assert plugin.runtime.looked_up == ["gone-1", "gone-1"]


def _headers_plainly(call, attempt, verbose: bool) -> dict:
    """The x-aisia-* headers with every value put through one_line on the spot."""
    from aisia_plugin.litellm.headers import reason_header

    d = attempt.decision
    return {"x-aisia-alias": one_line(call.alias), "x-aisia-strategy": one_line(d.strategy),
            "x-aisia-domain": one_line(d.domain or "none"), "x-aisia-reason": reason_header(call, attempt, verbose),
            "x-aisia-request-id": call.request_id}


def test_response_headers_equal_their_plain_reading(monkeypatch):
    """The policy's names are one_line'd once per (alias, strategy, domain): the same values as
    on the spot, for clean names and names that need cleaning, while the cache fills past its
    bound."""
    from aisia_plugin.decision import Decision
    from aisia_plugin.litellm import headers
    from aisia_plugin.litellm.lifecycle import Attempt, Call

    monkeypatch.setattr(headers, "_MAX_NAMES", 3)
    names = [("auto/bench", "ucb1", None), ("auto/bench", "ucb1", "coding"), ("auto/caf\xe9", "cost", "ma  th"),
             (" auto/x ", "lkgp", "\u540d"), ("auto/bench", "ucb1", None)]
    for rounds in range(2):
        for alias, strategy, domain in names:
            d = Decision("dep-1", None, strategy, "best of 2", 2, 0.9, alias=alias, domain=domain)
            call = Call(alias, "rid-1", None, 0.0)
            attempt = Attempt(d, ("dep-1",), {}, deployment_id="dep-1")
            for verbose in (False, True):
                assert headers.response_headers(call, attempt, verbose) == _headers_plainly(call, attempt, verbose)
            assert len(headers._NAMES) <= 3


def test_caller_key_equals_its_plain_reading(monkeypatch):
    """A key's hash is computed once per LiteLLM token: the same value as hashing it each time;
    a raw api_key (no token) is hashed each time and never kept."""
    from types import SimpleNamespace

    from aisia_plugin.litellm import tenancy as runtime  # (the key hash's home)

    monkeypatch.setattr(runtime, "_MAX_CALLERS", 2)
    runtime._CALLERS.clear()
    identities = [SimpleNamespace(token="tok-1", api_key="sk-1"), SimpleNamespace(token=None, api_key="sk-2"),
                  SimpleNamespace(token="", api_key=None), SimpleNamespace(token=None, api_key=None),
                  SimpleNamespace(token="tok-2", api_key=None), SimpleNamespace(token="tok-3"), object(),
                  SimpleNamespace(token=12345, api_key=None)]
    for _ in range(2):
        for ident in identities:
            value = getattr(ident, "token", None) or getattr(ident, "api_key", None)
            assert runtime.caller_key(ident) == (runtime.session_key(str(value)) if value else None)
            assert len(runtime._CALLERS) <= 2
    assert "sk-2" not in runtime._CALLERS and "sk-1" not in runtime._CALLERS


def test_a_router_used_alone_does_not_import_the_proxy_server(tmp_path):
    """The pre-call hook of an alias request outside a proxy reads no proxy Router, and does not
    import LiteLLM's proxy_server: importing it registers LiteLLM's own proxy callbacks into
    ``litellm.callbacks`` (its budget limiter), which the Router would then run on every request."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    (tmp_path / "policy.yaml").write_text("version: 1\naliases:\n  auto/one:\n    description: one\n"
                                          "    strategy: ucb1\n    candidates: {models: [one]}\n")
    script = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import litellm
        from router_harness import PluginRouters

        class Key:
            token = "hashed-key"
            api_key = None

        async def main():
            router, plugin = PluginRouters([{str(tmp_path / "policy.yaml")!r}]).make([
                {{"model_name": "one", "litellm_params": {{"model": "openai/one", "api_base": "http://127.0.0.1:9/v1",
                  "api_key": "sk-x"}}, "model_info": {{"id": "one"}}}}])
            data = await plugin.async_pre_call_hook(Key(), None, {{"model": "auto/one", "messages": [
                {{"role": "user", "content": "hi"}}]}}, "acompletion")
            await router.acompletion(**data, mock_response="hello")
            print("proxy_server" if "litellm.proxy.proxy_server" in sys.modules else "no proxy_server",
                  [type(c).__name__ for c in litellm.callbacks])

        asyncio.run(main())
    """)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "no proxy_server ['AisiaPlugin']"
