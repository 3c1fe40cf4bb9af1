"""Loading plugins: the entry-point group `aisia` (the built-in strategies are one of them)."""

from __future__ import annotations

import logging
import threading

import pluggy

from . import hookspecs

log = logging.getLogger("aisia_plugin.plugins")

# The built-in plugin modules, by their entry-point names in pyproject.toml. They implement the
# same hooks as any third-party plugin; registering them up front also covers a source tree that
# was never installed (no entry points visible).
DEFAULT_PLUGINS = (("builtin_strategies", "aisia_plugin.strategies.builtin"),)

_lock = threading.Lock()
_pm: pluggy.PluginManager | None = None
_strategies: dict[str, object] | None = None


def get_plugin_manager() -> pluggy.PluginManager:
    global _pm
    with _lock:
        if _pm is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT)
            pm.add_hookspecs(hookspecs)
            import importlib

            # Built-ins first, under their entry-point names, so that the entry-point loader skips
            # them and every third-party plugin is registered after them: pluggy calls the most
            # recent registration first, and the first registration of a name wins below.
            for ep_name, module in DEFAULT_PLUGINS:
                pm.register(importlib.import_module(module), ep_name)
            pm.load_setuptools_entrypoints(hookspecs.PROJECT)
            _pm = pm
        return _pm


def register_plugin(plugin, name: str | None = None) -> None:
    """Register a plugin object at run time (tests, embedding applications)."""
    pm = get_plugin_manager()
    pm.register(plugin, name)
    _reset_strategies()


def unregister_plugin(plugin) -> None:
    get_plugin_manager().unregister(plugin)
    _reset_strategies()


def _reset_strategies() -> None:
    global _strategies
    with _lock:
        _strategies = None


def strategies() -> dict[str, object]:
    """Every registered strategy by name and alias."""
    global _strategies
    if _strategies is not None:
        return _strategies
    pm = get_plugin_manager()
    found: dict[str, object] = {}

    def register(strategy, aliases=()):
        for name in (strategy.name, *aliases):
            if name in found and found[name] is not strategy:
                # Hooks run newest plugin first: the plugin registered last keeps the name.
                log.warning("strategy %r is provided by several plugins; the one registered last wins", name)
                continue
            found[name] = strategy

    call_each(pm.hook.register_strategies, register=register)
    with _lock:
        _strategies = found
    return found


def strategy_names() -> list[str]:
    return sorted(strategies())


def strategy_settings(name: str):
    """The alias settings a strategy reads (its `settings`), None when unknown or unsaid."""
    found = strategies().get(name)
    settings = getattr(found, "settings", None)
    return frozenset(settings) if settings is not None else None


def get_strategy(name: str):
    try:
        return strategies()[name]
    except KeyError:
        raise KeyError(f"no plugin provides the strategy {name!r}; known: {', '.join(strategy_names())}") from None


def hook():
    return get_plugin_manager().hook


def call_each(caller, **kwargs) -> list:
    """Call every implementation of a hook (``hook().<name>``) on its own: one that raises is
    logged with its plugin's name and skipped, the others still run. The results of those that
    returned something other than None, newest plugin first (pluggy's order)."""
    out = []
    for impl in reversed(caller.get_hookimpls()):
        try:
            result = impl.function(*[kwargs[a] for a in impl.argnames])
        except Exception:
            log.exception("aisia plugin %r raised in hook %s; routing goes on without it", impl.plugin_name,
                          caller.name)
            continue
        if result is not None:
            out.append(result)
    return out
