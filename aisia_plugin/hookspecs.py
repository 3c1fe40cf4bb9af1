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


# Every hook follows one rule: a plugin that raises is logged (log.exception, naming the plugin)
# and routing goes on without its contribution; the other plugins are still called.


@hookspec
def extract_features(messages, features):
    """Contribute request features: return a dict of extra features (merged into
    ``features.extra``) or None. ``features`` holds the built-in ones: read them, never assign
    to them (the decision uses this same object; it is not frozen, for speed)."""


@hookspec
def observe_decision(decision, features):
    """Called after every routing decision (for logging, metrics, audits) with the Decision and
    the request's features (``features.RequestFeatures``)."""


@hookspec
def observe_outcome(outcome, decision):
    """Called after the outcome of a routed call is known, with the Outcome and the Decision that
    routed it (one standing for it, with its alias and domain, when the caller recorded the
    outcome against an alias alone)."""
