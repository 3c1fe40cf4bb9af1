"""The extension points of aisia_plugin (pluggy hook specifications).

A plugin is a module or object with functions decorated by `aisia_plugin.hookimpl`, published
under the entry-point group `aisia`. The built-in strategies are such a plugin
(aisia_plugin/strategies/builtin.py) and are loaded the same way."""

from __future__ import annotations

import pluggy

PROJECT = "aisia"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_strategies(register):
    """Register routing strategies.

    Call ``register(strategy, aliases=())`` for each one; ``strategy`` has a ``name``, a
    ``description`` and ``select(pool, context) -> Decision``."""


@hookspec
def extract_features(messages, features):
    """Contribute request features: return a dict of extra features (merged into
    ``features.extra``) or None. ``features`` holds the built-in ones, read-only."""


@hookspec
def observe_decision(decision, context):
    """Called after every routing decision (for logging, metrics, audits). Must not raise."""


@hookspec
def observe_outcome(outcome, decision):
    """Called after the outcome of a routed call is known. Must not raise."""
