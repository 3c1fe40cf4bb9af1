"""The request path's fast paths against their plain readings: the header value's shortcut for a
string that is one clean line already, and the logging events of requests no alias routed (the
plugin does not read their outcome)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Mapping

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aisia_plugin.litellm import callback, events  # noqa: E402
from aisia_plugin.litellm.runtime import MAX_HEADER_CHARS, _one_line, one_line  # noqa: E402

# Texts near the shortcut's edges: spaces at the ends and in runs, tabs and newlines, other
# control characters, non-ASCII letters, around the length limit.
_CHARS = st.sampled_from(list("ab Z09 .:-+=()") + [" ", "  ", "\t", "\n", "\r", "\x0b", "\x1c", "\x00", "\x7f",
                                                  "é", "名", "\u2028", "\xa0"])
_TEXTS = st.lists(_CHARS, max_size=40).map("".join)


@given(_TEXTS, st.sampled_from([3, 5, 12, MAX_HEADER_CHARS]))
@settings(max_examples=2000, deadline=None)
def test_one_line_equals_its_plain_reading(text, limit):
    assert one_line(text, limit) == _one_line(text, limit)


def test_one_line_on_typical_values_and_non_strings():
    reason = "UCB1 picked bench-1: score 1.234 = reward 0.900 + exploration 0.300 + cost 0.017 + latency 0.017"
    for value in ("auto/bench", "ucb1", "none", reason, "", " x", "x ", "a  b", "a\tb", "caf\xe9", "x" * 300, 7, None):
        assert one_line(value) == _one_line(value)
    assert one_line(reason) is reason  # the shortcut: no copy


def test_request_metadata_equals_its_plain_reading():
    """Every place a request's metadata can be (or not be), in every shape LiteLLM or a caller
    could put there: the fast path returns the very object the plain reading returns."""
    from types import MappingProxyType

    shapes = [None, {}, {"aisia_request_id": "r1"}, MappingProxyType({"aisia_request_id": "r2"}), "text", 7, [],
              {"model_group": "auto/x"}]
    places = [(lm, m, params) for lm in shapes for m in shapes
              for params in (None, {}, {"metadata": None}, {"metadata": {"aisia_request_id": "r3"}},
                             {"metadata": MappingProxyType({"model_group": "g"})}, {"metadata": "x"}, "params")]
    for keep_none in (False, True):  # a key absent, and a key present with None
        for place in places:
            data = {k: v for k, v in zip(("litellm_metadata", "metadata", "litellm_params"), place)
                    if v is not None or keep_none}
            fast, plain = events.request_metadata(data), events._request_metadata(data)
            assert fast is plain or fast == plain == {}
            rid = plain.get("aisia_request_id")
            assert events.request_id(data) == (str(rid) if rid else None)
    for value in (*shapes, {"metadata": {}}, ()):
        plain = value if isinstance(value, Mapping) else {}
        assert events._dict(value) is plain or events._dict(value) == plain == {}


def test_stamped_request_ids_are_fresh_uuid4s():
    ids = [events.stamp_request_id({}) for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(uuid.UUID(hex=i).version == 4 and uuid.UUID(hex=i).hex == i for i in ids)


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
