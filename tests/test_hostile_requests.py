"""Hostile and odd requests reach the decision as they would from a proxy: whatever the messages,
tools and modalities look like, no exception escapes and the decision is one of the pool's."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.policy import load_policy

POLICY = load_policy()
POOL = [Deployment(id=f"d-{i}", model_name=f"m{i}", model=m, provider=m.split("/")[0], input_cost_per_1m=c,
                   output_cost_per_1m=c, specialities={"coding": None} if i == 1 else {})
        for i, (m, c) in enumerate([("openai/gpt-4o", 5.0), ("deepseek/deepseek-coder", 0.5), ("groq/llama-3", 0.3)])]
ALIASES = sorted(a for a in POLICY.aliases if a != "auto/offline")
# One engine for every example: building one compiles the domain patterns, and deciding records
# nothing, so examples cannot influence each other.
ENGINE = Engine(POLICY, clock=lambda: 1000.0, rng=random.Random(0))

text = st.text(alphabet=st.characters(codec="utf-8", categories=None), max_size=300) | \
    st.sampled_from(["\x00" * 50, "\ud800 lone surrogate", "e\u0301\u200b\u200d", "```python\ndef f(): pass\n```",
                     "traduis en anglais", "Génère une image"])
scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | text
leaf_part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "input_audio", "tool_result", 7])},
                                  optional={"text": scalar, "image_url": scalar})
content = st.recursive(scalar | leaf_part, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=3),
                       max_leaves=12)
message = st.fixed_dictionaries({}, optional={"role": scalar, "content": content, "name": scalar}) | scalar
messages = st.lists(message, max_size=8) | scalar | st.dictionaries(text, scalar, max_size=2)
tools = st.none() | st.lists(st.recursive(scalar, lambda i: st.lists(i, max_size=3) | st.dictionaries(text, i, max_size=3),
                                          max_leaves=10), max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=messages, tls=tools, alias=st.sampled_from(ALIASES),
       modalities=st.none() | st.lists(scalar, max_size=3))
def test_any_request_gets_a_decision_from_the_pool(msgs, tls, alias, modalities):
    d = ENGINE.decide(alias, msgs, POOL, tools=tls, request_modalities=modalities)
    assert d.deployment_id in {p.id for p in POOL} or d.refused
    assert isinstance(d.reason, str) and d.reason


def test_big_and_odd_requests_are_decided():
    eng = ENGINE
    cases = {
        "megabyte prompt": [{"role": "user", "content": "write a python function " * 45_000}],
        "ten thousand messages": [{"role": "user", "content": f"message {i}"} for i in range(10_000)],
        "NUL bytes": [{"role": "user", "content": "\x00" * 100_000}],
        "deep nesting": [{"role": "user", "content": [[[[[[[[[["x"]]]]]]]]]]}],
        "invalid unicode": [{"role": "user", "content": "\udcff\ud800" * 1000}],
    }
    huge_tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {"p": "x" * 100}}}
                  for i in range(5_000)]
    for name, msgs in cases.items():
        d = eng.decide("auto", msgs, POOL, tools=huge_tools if name == "ten thousand messages" else None)
        assert d.deployment_id in {p.id for p in POOL}, name
