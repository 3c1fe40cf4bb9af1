"""The built-in strategies and stores honour the declared contracts (aisia_plugin/interfaces.py),
and recording an outcome is one store operation whose result equals the pure update."""

from __future__ import annotations

import inspect

import pytest

from aisia_plugin import plugins
from aisia_plugin.bandit import ArmStats, update
from aisia_plugin.breaker import CircuitBreaker, FailureKind
from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.interfaces import StateStore, Strategy
from aisia_plugin.learning import LearningRules, OutcomeRecord, apply_outcome
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy
from aisia_plugin.state import open_store
from aisia_plugin.state.memory import MemoryState

POLICY = load_policy()


@pytest.mark.parametrize("name", sorted(set(plugins.strategy_names())))
def test_every_registered_strategy_is_a_strategy(name):
    strategy = plugins.get_strategy(name)
    assert isinstance(strategy, Strategy), name
    assert list(inspect.signature(strategy.select).parameters) == ["pool", "context"]


def test_the_memory_store_is_a_state_store():
    assert isinstance(MemoryState(), StateStore)
    assert isinstance(open_store(POLICY), StateStore)


class _CountingStore(MemoryState):
    """A memory store that counts the calls the engine makes to it."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []
        self.inside = False  # calls the store makes to itself while recording are its own business

    def record_outcome(self, rec, rules):
        self.calls.append("record_outcome")
        self.inside = True
        try:
            return super().record_outcome(rec, rules)
        finally:
            self.inside = False

    def __getattribute__(self, name):
        if name in ("put_arm", "put_breaker", "advance_tick", "set_last_known_good", "arm", "breaker"):
            if not object.__getattribute__(self, "inside"):
                object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


def test_engine_records_an_outcome_in_one_store_call():
    store = _CountingStore()
    eng = Engine(POLICY, clock=lambda: 50.0, store=store)
    dep = Deployment(id="a-1", model_name="g", model="openai/gpt-4o", provider="openai")
    d = eng.decide("auto/coding", [{"role": "user", "content": "write a python function"}], [dep])
    store.calls.clear()
    assert eng.record(d, Outcome("a-1", success=True, latency_s=0.5)) is not None
    assert store.calls == ["record_outcome"]
    assert store.arm("a-1").count == 1 and store.arm("a-1", "coding").count == 1
    assert store.last_known_good("auto/coding") == "a-1"


def test_store_record_equals_the_pure_update():
    rules = LearningRules(CircuitBreaker(POLICY.circuit_breaker), gamma=0.99, ema_weight=0.2)
    st = MemoryState()
    g = d = None
    tick = 0.0
    bs = None
    seq = [(None, 0.9, 0.4), (FailureKind.PROVIDER, 0.0, 2.0), (FailureKind.CLIENT, 0.0, 0.1),
           (FailureKind.RATE_LIMIT, 0.0, 0.1), (None, 0.7, 1.0)]
    for i, (kind, reward, lat) in enumerate(seq):
        rec = OutcomeRecord("x", now=10.0 + i, kind=kind, reward=reward, latency_s=lat, alias="auto", domain="math")
        st.record_outcome(rec, rules)
        out = apply_outcome(rec, rules, bs, tick, g, d)
        bs, tick = out.breaker, out.tick
        g = out.global_arm or g
        d = out.domain_arm or d
    assert st.arm("x") == g and st.arm("x", "math") == d and st.breaker("x") == bs and st.ticks == tick == 3.0
    # Client errors and rate limits teach the bandit nothing.
    assert g.count == 3
    manual = ArmStats()
    for t, (r, lat, failed) in enumerate([(0.9, 0.4, False), (0.0, 2.0, True), (0.7, 1.0, False)], start=1):
        manual = update(manual, reward=r, latency_s=lat, failed=failed, tick=float(t), gamma=0.99)
    assert manual == g
