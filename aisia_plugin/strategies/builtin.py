"""The built-in strategies, registered through the same hook a third-party plugin uses."""

from __future__ import annotations

from ..hookspecs import hookimpl

# (module, class name, aliases): one line per built-in strategy.
_BUILTINS: list[tuple[str, str, tuple[str, ...]]] = [
    (".bandit", "UCB1Strategy", ()),
    (".bandit", "ThompsonStrategy", ()),
    (".cost", "CostStrategy", ("eco",)),
    (".latency", "LatencyStrategy", ("fast",)),
    (".sla", "SlaStrategy", ("sla",)),
    (".lkgp", "LkgpStrategy", ()),
    (".rules", "RulesStrategy", ()),
    (".contextual", "ContextualStrategy", ()),
]


@hookimpl
def register_strategies(register):
    import importlib

    for module, cls_name, aliases in _BUILTINS:
        cls = getattr(importlib.import_module(module, __package__), cls_name)
        register(cls(), aliases=aliases)
