"""The pure core's fast paths against their plain readings: records and contexts built by
position or through their slots instead of by keyword (the same objects, for less work per
request)."""

from __future__ import annotations

import dataclasses
import random
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import deployment, spy_on_strategies
from aisia_plugin.bandit import ArmStats
from aisia_plugin.breaker import CircuitBreaker, FailureKind
from aisia_plugin.learning import Applied, LearningRules, OutcomeRecord, apply_outcome, outcome_record
from aisia_plugin.decision import RoutingContext
from aisia_plugin.engine import Engine
from aisia_plugin.outcome import Outcome, _reward, reward
from aisia_plugin.policy import load_policy
from aisia_plugin.policy.models import Reward

POLICY = """
version: 1
aliases:
  auto: {strategy: ucb1}
domains:
  definitions:
    coding: {patterns: ['\\\\bpython\\\\b', '\\\\bfunction\\\\b']}
"""
MSG = [{"role": "user", "content": "write a python function, in python"}]


def _engine(tmp_path, seed: int = 3) -> Engine:
    (tmp_path / "aliases.yaml").write_text(textwrap.dedent(POLICY))
    return Engine(load_policy([tmp_path / "aliases.yaml"]), clock=lambda: 1000.0, rng=random.Random(seed))


def test_the_engines_context_built_by_position_is_the_keyword_one(tmp_path, monkeypatch):
    eng = _engine(tmp_path)
    deps = [deployment("a"), deployment("b")]
    eng.record("auto", Outcome("a", True, latency_s=0.5))
    seen = []
    spy_on_strategies(monkeypatch, seen)
    d = eng.decide("auto", MSG, deps)
    (ctx,) = seen
    feats = eng.features(MSG)
    by_keyword = RoutingContext(alias="auto", strategy="ucb1", features=ctx.features, domain=d.domain,
                                task_type=d.task_type, now=1000.0, rng=eng.rng, settings=eng._settings["auto"],
                                last_known_good="a", policy=eng.policy, contextual=eng.contextual, quality=eng,
                                quality_domain=ctx.quality_domain)
    assert ctx == by_keyword
    assert ctx.features == feats and ctx.total_pulls is None and ctx.cost_multiplier == 1.0
    for name in ("rng", "settings", "policy", "contextual"):  # the engine's own objects, not copies
        assert getattr(ctx, name) is getattr(eng, "_settings" if name == "settings" else name) or name == "settings"
    assert ctx.settings is eng._settings["auto"]
    assert [f.name for f in dataclasses.fields(RoutingContext)][:12] == [
        "alias", "strategy", "features", "domain", "task_type", "now", "rng", "settings", "last_known_good",
        "total_pulls", "policy", "contextual"]  # the order the engine passes them in


_MAYBE_TEXT = st.none() | st.text(max_size=8)
_MAYBE_NUMBER = st.none() | st.floats(allow_nan=False)


@given(st.tuples(st.text(max_size=8), st.floats(allow_nan=False), st.none() | st.sampled_from(list(FailureKind)),
                 st.floats(0, 1), _MAYBE_NUMBER, _MAYBE_TEXT, _MAYBE_TEXT, _MAYBE_NUMBER, _MAYBE_TEXT, _MAYBE_TEXT,
                 _MAYBE_NUMBER))
@settings(max_examples=300, deadline=None)
def test_outcome_record_through_its_slots_is_the_constructors(values):
    fast, plain = outcome_record(*values), OutcomeRecord(*values)
    assert type(fast) is OutcomeRecord and fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
    assert [getattr(fast, f.name) for f in dataclasses.fields(OutcomeRecord)] == list(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.reward = 0.0


def test_applied_through_its_slots_is_the_constructors(tmp_path):
    rules = LearningRules(CircuitBreaker(_engine(tmp_path).policy.circuit_breaker), gamma=0.99)
    g, d = ArmStats(pulls=3.0, total_reward=2.0, count=3, tick=4.0), ArmStats(pulls=1.0, total_reward=1.0, count=1)
    for kind in (None, FailureKind.PROVIDER, FailureKind.CLIENT):
        for domain in (None, "coding"):
            rec = OutcomeRecord("a", 10.0, kind, 0.7, 0.4, "auto", domain)
            out = apply_outcome(rec, rules, None, 5.0, g, d if domain else None)
            plain = Applied(*(getattr(out, f.name) for f in dataclasses.fields(Applied)))
            assert type(out) is Applied and out == plain and repr(out) == repr(plain)
            with pytest.raises(dataclasses.FrozenInstanceError):
                out.tick = 0.0


_WEIGHT = st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0, 3.0]) | st.floats(0, 10)


@given(st.booleans(), st.none() | st.floats(-1, 2), st.none() | st.floats(-1, 100), st.none() | st.floats(-1, 2),
       _WEIGHT, _WEIGHT, _WEIGHT, st.floats(0, 1), st.floats(1, 1e5), st.floats(0, 1))
@settings(max_examples=2000, deadline=None)
def test_reward_equals_its_plain_reading(success, quality, latency_s, feedback, qw, lw, fw, failure, target, plain):
    cfg = Reward(quality_weight=qw, latency_weight=lw, feedback_weight=fw, failure_reward=failure)
    o = Outcome("a", success, latency_s=latency_s, quality=quality, feedback=feedback)
    assert reward(o, cfg, target, plain) == _reward(o, cfg, target, plain)
