"""Checks the schema cannot express: references resolve, weights are usable, patterns are safe."""

from __future__ import annotations

import difflib
import math

from .errors import PolicyIssue, dotted
from .patterns import PatternError, compile_pattern
from .yamlpos import Locations, position_of

TASK_TYPES = ("coding", "review", "planning", "analysis", "debugging", "documentation", "default")


def semantic_issues(data: dict, locs: Locations, known_strategies: set[str]) -> list[PolicyIssue]:
    issues: list[PolicyIssue] = []

    def report(path: tuple, message: str, key: bool = False):
        pos = position_of(locs, path, key=key)
        issues.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                  pos.column if pos else 0, dotted(path), message, "semantic"))

    packs = data.get("mode_packs", {})
    domains = data.get("domains", {}).get("definitions", {})

    def unknown(kind: str, value: str, choices) -> str:
        close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else (f"; known: {', '.join(sorted(choices))}" if choices else "")
        return f"unknown {kind} '{value}'{hint}"

    for name, alias in data.get("aliases", {}).items():
        base = ("aliases", name)
        strategy = alias.get("strategy")
        if strategy not in known_strategies:
            report(base + ("strategy",), unknown("strategy", strategy, known_strategies) + " (no installed plugin provides it)")
        pack = alias.get("mode_pack")
        if pack is not None and pack not in packs:
            report(base + ("mode_pack",), unknown("mode pack", pack, packs))
        hint = alias.get("domain_hint")
        if hint is not None and hint not in domains:
            report(base + ("domain_hint",), unknown("domain", hint, domains))
        task = alias.get("task_hint")
        if task is not None and task not in TASK_TYPES:
            report(base + ("task_hint",), unknown("task type", task, TASK_TYPES))

    _check_weights(data.get("rules", {}).get("weights", {}), ("rules", "weights"), report)
    for pname, pack in packs.items():
        _check_weights(pack.get("weights", {}), ("mode_packs", pname, "weights"), report)

    for dname, domain in domains.items():
        for i, pattern in enumerate(domain.get("patterns", [])):
            try:
                compile_pattern(pattern)
            except PatternError as exc:
                report(("domains", "definitions", dname, "patterns", i), str(exc))

    for dep, ann in data.get("deployments", {}).items():
        for dom in ann.get("specialities", {}):
            if dom not in domains:
                report(("deployments", dep, "specialities", dom), unknown("domain", dom, domains), key=True)

    for model, tasks in data.get("task_fitness", {}).get("models", {}).items():
        for task in tasks:
            if task not in TASK_TYPES:
                report(("task_fitness", "models", model, task), unknown("task type", task, TASK_TYPES), key=True)
    for i, boost in enumerate(data.get("task_fitness", {}).get("boosts", [])):
        for j, task in enumerate(boost.get("tasks", [])):
            if task not in TASK_TYPES:
                report(("task_fitness", "boosts", i, "tasks", j), unknown("task type", task, TASK_TYPES))

    cb = data.get("circuit_breaker", {})
    if cb and cb.get("max_retry_after_s", 0) < cb.get("rate_limit_cooldown_s", 0):
        report(("circuit_breaker", "max_retry_after_s"), "must be at least rate_limit_cooldown_s")
    return issues


def _check_weights(weights: dict, path: tuple, report) -> None:
    values = list(weights.values())
    for k, v in weights.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            report(path + (k,), f"weight must be a finite number, got {v!r}")
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if values and sum(max(0.0, v) for v in finite) <= 0:
        report(path, "weights are all zero: at least one factor must weigh more than 0")
