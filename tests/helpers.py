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
