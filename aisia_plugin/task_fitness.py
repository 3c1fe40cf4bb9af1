"""Model x task fitness (docs/design.md#task-fitness: the source's table, with its two bugs avoided).

Lookup for (model, task):

1. the static table: its keys are globs (fnmatch, case-insensitive) matched against the full
   model string ("openai/gpt-4o-mini") and against the part after the last "/" ("gpt-4o-mini").
   The MOST SPECIFIC matching pattern wins (most literal characters, then the longest pattern;
   see ``globs.specificity``), never the first one inserted: "gpt-4o-mini" gets the gpt-4o-mini
   row, not gpt-4o's. Within the row: the task's score, else the row's "default" key, else the
   table's default;
2. a model no pattern matches: the table's default plus every applicable wildcard boost (the
   boost's `contains` is a case-insensitive substring of the model name without its provider
   prefix; a boost with no tasks applies to every task).

Results are clamped to [0, 1] and cached per (model, task): this runs once per candidate per
request."""

from __future__ import annotations

import threading
from typing import Optional

from .globs import most_specific
from .numbers import clamp01
from .policy.models import TaskFitness

CACHE_SIZE = 4096


def _bare(model: str) -> str:
    """The model without its provider prefix ("openai/gpt-4o" -> "gpt-4o")."""
    return model.rsplit("/", 1)[-1]


class TaskFitnessTable:
    def __init__(self, cfg: TaskFitness, cache_size: int = CACHE_SIZE):
        self.cfg = cfg
        self.default = float(cfg.default)
        self._rows = {pattern: {k.lower(): float(v) for k, v in row.items()} for pattern, row in cfg.models.items()}
        self._boosts = [(b.contains.lower(), {t.lower() for t in b.tasks}, float(b.boost)) for b in cfg.boosts]
        # The one cache: task -> model -> fitness, at most cache_size values in all (then it starts
        # over rather than grow without limit). Engine pools keep their own tuples of it, dropped
        # with the pool.
        self._by_task: dict[str, dict[str, float]] = {}
        self._cached = 0
        self._cache_size = max(1, int(cache_size))
        self._lock = threading.Lock()

    @property
    def cached(self) -> int:
        """How many (model, task) values the cache holds (at most ``cache_size``)."""
        return self._cached

    def pattern_for(self, model: str) -> Optional[str]:
        """The table pattern that decides `model`'s row (None: the model is not in the table)."""
        if not model:
            return None
        return most_specific(self._rows, (model, _bare(model)))

    def fitness(self, model: str, task: str) -> float:
        return self.fitness_of((model,), task)[0]

    def fitness_of(self, models, task: str) -> list[float]:
        """``fitness(model, task)`` for each of `models`, in one call (a pool's worth per request)."""
        task = (task or "default").lower()
        by_model = self._by_task.get(task)
        if by_model is None:
            by_model = self._by_task.setdefault(task, {})
        out = []
        for model in models:
            model = model or ""
            hit = by_model.get(model)
            if hit is None:
                hit = clamp01(self._compute(model, task))
                with self._lock:
                    if self._cached >= self._cache_size:
                        self._by_task.clear()
                        self._cached = 0
                        by_model = self._by_task[task] = {}
                    by_model[model] = hit
                    self._cached += 1
            out.append(hit)
        return out

    def family_fitness(self, model: str, task: str) -> Optional[float]:
        """What the table knows of `model`'s family for `task`: its row's score for the task, else
        the row's "default" key, else the mean of the row's scores (a task the row does not score,
        such as a prompt of no particular task); None when no pattern matches `model` (the
        table does not know its family). Off the request path (a deployment's cold prior)."""
        pattern = self.pattern_for(model or "")
        if pattern is None:
            return None
        row = self._rows[pattern]
        task = (task or "default").lower()
        if task in row or "default" in row or not row:
            return clamp01(self._compute(model, task))  # the row's reading, as fitness() reads it
        return clamp01(sum(row.values()) / len(row))

    def _compute(self, model: str, task: str) -> float:
        pattern = self.pattern_for(model)
        if pattern is not None:
            row = self._rows[pattern]
            if task in row:
                return row[task]
            return row.get("default", self.default)
        name = _bare(model).lower()
        score = self.default
        for contains, tasks, boost in self._boosts:
            if contains and contains in name and (not tasks or task in tasks):
                score += boost
        return score
