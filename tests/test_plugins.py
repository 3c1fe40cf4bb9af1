"""Strategies come from plugins; a third-party plugin uses the same hook as the built-ins and may
replace a built-in strategy."""

from aisia_plugin import plugins
from aisia_plugin.decision import Decision
from aisia_plugin.hookspecs import hookimpl


class AlwaysLast:
    name = "rules"
    description = "test double for a third-party rules replacement"

    def select(self, pool, context):
        c = pool[-1]
        return Decision(c.id, c.deployment.model, self.name, "always the last", len(pool), 1.0)


class Plugin:
    @hookimpl
    def register_strategies(self, register):
        register(AlwaysLast(), aliases=("last",))


def test_builtins_are_registered_through_the_hook():
    impls = [i.plugin_name for i in plugins.get_plugin_manager().hook.register_strategies.get_hookimpls()]
    assert "builtin_strategies" in impls
    assert {"ucb1", "thompson", "cost", "eco", "latency", "fast", "sla-aware", "sla", "lkgp", "rules"} <= set(plugins.strategy_names())


def test_a_third_party_plugin_adds_and_replaces_strategies():
    p = Plugin()
    plugins.register_plugin(p, "test-third-party")
    try:
        assert isinstance(plugins.get_strategy("last"), AlwaysLast)
        assert isinstance(plugins.get_strategy("rules"), AlwaysLast)
    finally:
        plugins.unregister_plugin(p)
    assert not isinstance(plugins.get_strategy("rules"), AlwaysLast)
    assert "last" not in plugins.strategy_names()


# -- the four hooks: what they carry, and one rule for a plugin that raises (issue 11, the house) --
import logging  # noqa: E402
import random  # noqa: E402

import pytest  # noqa: E402

from aisia_plugin.decision import Deployment  # noqa: E402
from aisia_plugin.engine import Engine  # noqa: E402
from aisia_plugin.features import RequestFeatures  # noqa: E402
from aisia_plugin.outcome import Outcome  # noqa: E402
from aisia_plugin.policy import load_policy  # noqa: E402


class Recorder:
    def __init__(self):
        self.seen = []

    @hookimpl
    def extract_features(self, messages, features):
        self.seen.append(("features", features))
        return {"team": "blue"}

    @hookimpl
    def observe_decision(self, decision, features):
        self.seen.append(("decision", decision, features))

    @hookimpl
    def observe_outcome(self, outcome, decision):
        self.seen.append(("outcome", outcome, decision))


class Raiser:
    @hookimpl
    def register_strategies(self, register):
        raise RuntimeError("broken registration")

    @hookimpl
    def extract_features(self, messages, features):
        raise RuntimeError("broken features")

    @hookimpl
    def observe_decision(self, decision, features):
        raise RuntimeError("broken observer")

    @hookimpl
    def observe_outcome(self, outcome, decision):
        raise RuntimeError("broken outcome observer")


@pytest.fixture
def hooked():
    rec, bad = Recorder(), Raiser()
    plugins.register_plugin(rec, "test-recorder")
    plugins.register_plugin(bad, "test-raiser")
    try:
        yield rec
    finally:
        plugins.unregister_plugin(bad)
        plugins.unregister_plugin(rec)


def test_every_hook_carries_what_it_says_and_a_raising_plugin_is_logged(hooked, caplog):
    pool = [Deployment(id="a-1", model_name="a-1", model="openai/a", provider="openai")]
    engine = Engine(load_policy(), clock=lambda: 0.0, rng=random.Random(0))
    with caplog.at_level(logging.ERROR, logger="aisia_plugin.plugins"):
        assert "ucb1" in plugins.strategy_names()  # a raising register_strategies leaves the others
        d = engine.decide("auto", [{"role": "user", "content": "hello"}], pool)
        engine.record(d, Outcome("a-1", success=True, latency_s=0.2))
        engine.record("auto/cheap", Outcome("a-1", success=True, latency_s=0.2), domain="coding")
    assert d.deployment_id == "a-1"
    kinds = [s[0] for s in hooked.seen]
    assert kinds == ["features", "decision", "outcome", "outcome"]
    _, decision, features = hooked.seen[1]
    assert decision is d and isinstance(features, RequestFeatures) and features.extra == {"team": "blue"}
    assert hooked.seen[2][2] is d
    standing = hooked.seen[3][2]
    assert isinstance(standing, Decision) and (standing.alias, standing.domain, standing.deployment_id) == (
        "auto/cheap", "coding", "a-1")
    logged = [r.getMessage() for r in caplog.records]
    for hook in ("register_strategies", "extract_features", "observe_decision", "observe_outcome"):
        assert f"aisia plugin 'test-raiser' raised in hook {hook}; routing goes on without it" in logged
    assert all(r.exc_info for r in caplog.records)
