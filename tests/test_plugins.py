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
