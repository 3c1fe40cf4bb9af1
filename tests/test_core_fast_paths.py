"""The pure core's one fast path left: the engine builds its RoutingContext by position (the
field order pinned here). It saves under 1 % of an alias request (benchmarks/results/fast_paths.md)
and folds back to keywords with the engine's decision stages (issue 36); this file goes with it."""

from __future__ import annotations

import dataclasses
import random
import textwrap

from helpers import deployment, spy_on_strategies
from aisia_plugin.decision import RoutingContext
from aisia_plugin.engine import Engine
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy

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
                                last_known_good="a", policy=eng.policy, contextual=eng.contextual)
    assert ctx == by_keyword
    assert ctx.features == feats and ctx.total_pulls is None and ctx.cost_multiplier == 1.0
    for name in ("rng", "settings", "policy", "contextual"):  # the engine's own objects, not copies
        assert getattr(ctx, name) is getattr(eng, "_settings" if name == "settings" else name) or name == "settings"
    assert ctx.settings is eng._settings["auto"]
    assert [f.name for f in dataclasses.fields(RoutingContext)][:12] == [
        "alias", "strategy", "features", "domain", "task_type", "now", "rng", "settings", "last_known_good",
        "total_pulls", "policy", "contextual"]  # the order the engine passes them in
