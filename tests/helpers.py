"""Helpers shared by the test modules (plain functions, no fixtures)."""

from __future__ import annotations

import random

from aisia_plugin.bandit import ArmStats, update


def arm_history(seed: int, n: int, gamma: float) -> ArmStats:
    """An arm record after `n` random outcomes at random ticks, learned with forgetting `gamma`."""
    r = random.Random(seed)
    s, t = ArmStats(), 0.0
    for _ in range(n):
        t += r.randint(0, 40)
        s = update(s, reward=r.random(), latency_s=r.uniform(0.1, 4.0), failed=r.random() < 0.2, tick=t, gamma=gamma)
    return s


def context(pool=(), *, strategy: str = "x", seed: int = 7, rng=None, now: float = 0.0, task_type: str = "default",
            domain=None, specificity=None, features=None, **kw):
    """A RoutingContext as the engine builds one, for calling a strategy directly: keyword
    arguments naming an ``AliasSettings`` field go to the alias's settings (rules weights default
    to the schema's, docs/design.md#rules-the-16-factors, normalised), the others to the context;
    UCB1's N defaults to the pool's pulls."""
    from dataclasses import fields
    from types import SimpleNamespace

    from aisia_plugin.decision import AliasSettings, RoutingContext
    from aisia_plugin.weights import DEFAULT_WEIGHTS, normalise

    names = {f.name for f in fields(AliasSettings)}
    settings = {k: kw.pop(k) for k in list(kw) if k in names}
    settings.setdefault("weights", normalise(DEFAULT_WEIGHTS))
    kw.setdefault("total_pulls", sum(c.stats.pulls for c in pool))
    return RoutingContext(alias=kw.pop("alias", "auto"), strategy=strategy,
                          features=features if features is not None else SimpleNamespace(specificity=specificity),
                          domain=domain, task_type=task_type, now=now,
                          rng=rng if rng is not None else random.Random(seed), settings=AliasSettings(**settings), **kw)


def deployment(id: str, cost: float = 1.0, *, provider: str | None = None, model: str | None = None,
               model_name: str | None = None, **kw):
    """A Deployment for a test pool: provider from the id's prefix ("openai-4o" -> openai), model
    "provider/id", the same price per 1M tokens in and out; any other field by keyword."""
    from aisia_plugin.decision import Deployment

    provider = provider or id.split("-")[0]
    return Deployment(id=id, model_name=model_name or id, model=model or f"{provider}/{id}", provider=provider,
                      input_cost_per_1m=cost, output_cost_per_1m=cost, **kw)


def spy_on_strategies(monkeypatch, seen: list, record=lambda pool, ctx: ctx) -> None:
    """Every strategy the engine asks for, wrapped: each select appends ``record(pool, ctx)``
    to `seen`, then decides as the strategy does."""
    from aisia_plugin import plugins

    real = plugins.get_strategy

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def select(self, pool, ctx):
            seen.append(record(pool, ctx))
            return self.inner.select(pool, ctx)

    monkeypatch.setattr(plugins, "get_strategy", lambda name: Spy(real(name)))
