"""The pure core's fast paths against their plain readings: records and contexts built by
position or through their slots instead of by keyword (the same objects, for less work per
request)."""

from __future__ import annotations

import dataclasses
import random
import textwrap

from helpers import deployment
from aisia_plugin import plugins
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
    real = plugins.get_strategy

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def select(self, pool, ctx):
            seen.append(ctx)
            return self.inner.select(pool, ctx)

    monkeypatch.setattr(plugins, "get_strategy", lambda name: Spy(real(name)))
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
