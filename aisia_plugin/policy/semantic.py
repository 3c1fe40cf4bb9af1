"""Checks the schema cannot express: references resolve, weights are usable, patterns are safe.

They run on the merged document even when the schema rejected parts of it (so that one run
reports every error), hence every lookup tolerates a value of the wrong shape: the schema has
already reported it, and the check simply skips it."""

from __future__ import annotations

import difflib
import math
import re

from ..schema_defaults import defaults_of
from .errors import PolicyIssue, dotted
from ..judging import DEFAULT_RUBRIC, alias_as_judge
from ..signals import matches_empty
from .patterns import PatternError, compile_pattern
from .yamlpos import Locations, position_of

TASK_TYPES = ("coding", "review", "planning", "analysis", "debugging", "documentation", "default")

# Words an operator may write for a strategy, by meaning: an unknown strategy name is looked up
# here (whole, then word by word) before it is matched by spelling, so that 'cheapest' suggests
# 'cost', not the 'fast' its letters are closest to.
STRATEGY_SYNONYMS = {
    "cost": ("cheap", "cheaper", "cheapest", "price", "pricing", "budget", "economy", "economical", "low-cost",
             "lowest-cost", "cost-based", "money", "savings"),
    "latency": ("fastest", "faster", "quick", "quickest", "speed", "speedy", "rapid", "low-latency",
                "lowest-latency", "latency-based", "responsive"),
    "ucb1": ("ucb", "bandit", "mab", "explore", "adaptive", "learning", "learned"),
    "thompson": ("thompson-sampling", "sampling", "bayesian", "posterior"),
    "lkgp": ("sticky", "session", "sessions", "pin", "pinned", "affinity", "last-good", "last-known-good", "lkg"),
    "rules": ("rule", "rule-based", "weighted", "weights", "scoring", "static"),
    "sla-aware": ("slo", "deadline", "p95", "sla-based", "target"),
    "contextual": ("context", "context-aware", "prompt-aware", "linucb", "per-prompt", "features"),
}
_MEANS = {word: strategy for strategy, words in STRATEGY_SYNONYMS.items() for word in words}


def strategy_by_meaning(value: str, known) -> "str | None":
    """The known strategy `value` names by meaning (``STRATEGY_SYNONYMS``), or None."""
    text = "-".join(str(value).lower().replace("_", " ").split())
    for word in (text, *re.split(r"[-./]+", text)):
        strategy = _MEANS.get(word)
        if strategy in known:
            return strategy
    return None


def _map(v) -> dict:
    return v if isinstance(v, dict) else {}


def _seq(v) -> list:
    return v if isinstance(v, list) else []


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def semantic_issues(data: dict, locs: Locations, known_strategies: set[str]) -> list[PolicyIssue]:
    issues: list[PolicyIssue] = []
    data = _map(data)

    def report(path: tuple, message: str, key: bool = False):
        pos = position_of(locs, path, key=key)
        issues.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                  pos.column if pos else 0, dotted(path), message, "semantic"))

    packs = _map(data.get("mode_packs"))
    domains = _map(_map(data.get("domains")).get("definitions"))
    _check_aliases(_map(data.get("aliases")), known_strategies, packs, domains, report)
    _check_weights(_map(_map(data.get("rules")).get("weights")), ("rules", "weights"), report)
    for pname, pack in packs.items():
        if isinstance(pack, dict) and isinstance(pack.get("weights"), dict):
            _check_weights(pack["weights"], ("mode_packs", pname, "weights"), report)
    reward = _map(data.get("reward"))
    terms = [reward.get(k) for k in ("quality_weight", "latency_weight", "feedback_weight")]
    if all(_number(v) for v in terms) and sum(terms) <= 0:
        report(("reward",), key=True, message="quality_weight, latency_weight and feedback_weight are all zero: "
                            "a successful call would have no reward; give at least one of them a weight above 0")
    _check_patterns(domains, _map(_map(data.get("signals")).get("lexicons")), report)
    _check_domains_and_tasks(data, domains, report)
    judge = _map(_map(data.get("quality")).get("judge"))
    _check_judge(judge, _map(data.get("aliases")), report)
    for language, spec in _map(judge.get("languages")).items():
        for dom in _map(_map(spec).get("rubrics")):
            if dom != "default" and dom not in domains:
                report(("quality", "judge", "languages", language, "rubrics", dom),
                       _unknown("domain", dom, domains, "domains (domains.definitions)") + " (or 'default')", key=True)
    cb = _map(data.get("circuit_breaker"))
    cap, cooldown = cb.get("max_retry_after_s"), cb.get("rate_limit_cooldown_s")
    if _number(cap) and _number(cooldown) and cap < cooldown:
        report(("circuit_breaker", "max_retry_after_s"),
               f"value {cap} is below circuit_breaker.rate_limit_cooldown_s ({cooldown}): the cap on Retry-After "
               "must be at least the default cooldown")
    return issues


def _unknown(kind: str, value, choices, plural: str) -> str:
    """'unknown KIND 'VALUE'' with the closest known name, else the known ones."""
    choices = sorted(str(c) for c in choices)
    meant = strategy_by_meaning(value, choices) if kind == "strategy" else None
    close = [meant] if meant else difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5)
    if close:
        hint = f"; did you mean '{close[0]}'?"
    elif choices:
        hint = f"; known: {', '.join(choices)}"
    else:
        hint = f"; the policy defines no {plural}"
    return f"unknown {kind} '{value}'{hint}"


def _check_aliases(aliases: dict, known_strategies: set[str], packs: dict, domains: dict, report) -> None:
    """Each alias's strategy, mode pack, domain hint and task hint name something that exists."""
    for name, alias in aliases.items():
        if not isinstance(alias, dict):
            continue
        base = ("aliases", name)
        strategy = alias.get("strategy")
        if isinstance(strategy, str) and strategy and strategy not in known_strategies:
            report(base + ("strategy",),
                   _unknown("strategy", strategy, known_strategies, "strategies") + " (no installed plugin provides it)")
        pack = alias.get("mode_pack")
        if isinstance(pack, str) and pack not in packs:
            report(base + ("mode_pack",), _unknown("mode pack", pack, packs, "mode packs (mode_packs)"))
        hint = alias.get("domain_hint")
        if isinstance(hint, str) and hint not in domains:
            report(base + ("domain_hint",), _unknown("domain", hint, domains, "domains (domains.definitions)"))
        task = alias.get("task_hint")
        if isinstance(task, str) and task not in TASK_TYPES:
            report(base + ("task_hint",), _unknown("task type", task, TASK_TYPES, "task types"))


def _check_patterns(domains: dict, lexicons: dict, report) -> None:
    """The domains' patterns and the signal lexicons' compile (RE2); a lexicon entry that
    matches the empty string would fire on every message."""
    for dname, domain in domains.items():
        if not isinstance(domain, dict):
            continue
        for i, pattern in enumerate(_seq(domain.get("patterns"))):
            if not isinstance(pattern, str) or not pattern:
                continue
            try:
                compile_pattern(pattern)
            except PatternError as exc:
                report(("domains", "definitions", dname, "patterns", i), str(exc))
    for language, lexicon in lexicons.items():
        for category, entries in _map(lexicon).items():
            for name, pattern in _map(entries).items():
                if not isinstance(pattern, str) or not pattern:
                    continue
                path = ("signals", "lexicons", language, category, name)
                try:
                    compile_pattern(pattern)
                except PatternError as exc:
                    report(path, str(exc))
                    continue
                if matches_empty(pattern):
                    report(path, f"pattern '{pattern}' matches the empty string: it would fire on every message")


def _check_domains_and_tasks(data: dict, domains: dict, report) -> None:
    """The deployments' specialities name defined domains; the task-fitness table known task types."""
    for dep, ann in _map(data.get("deployments")).items():
        if not isinstance(ann, dict):
            continue
        for dom in _map(ann.get("specialities")):
            if dom not in domains:
                report(("deployments", dep, "specialities", dom),
                       _unknown("domain", dom, domains, "domains (domains.definitions)"), key=True)
    fitness = _map(data.get("task_fitness"))
    for model, tasks in _map(fitness.get("models")).items():
        for task in _map(tasks):
            if task not in TASK_TYPES:
                report(("task_fitness", "models", model, task), _unknown("task type", task, TASK_TYPES, "task types"),
                       key=True)
    for i, boost in enumerate(_seq(fitness.get("boosts"))):
        if not isinstance(boost, dict):
            continue
        for j, task in enumerate(_seq(boost.get("tasks"))):
            if isinstance(task, str) and task not in TASK_TYPES:
                report(("task_fitness", "boosts", i, "tasks", j), _unknown("task type", task, TASK_TYPES, "task types"))


def _check_judge(judge: dict, aliases: dict, report) -> None:
    """The judge grades through a deployment, never an alias (an alias would route its own
    grading and learn from it); its default language must have words to grade with. Whether
    the deployment exists is the config's to say (`aisia validate --deployments`, the proxy's
    start: litellm/judge.py ``judge_issues``)."""
    name = judge.get("deployment")
    if isinstance(name, str) and name in aliases:
        report(("quality", "judge", "deployment"), alias_as_judge(name))
    languages = judge.get("languages")
    default = judge.get("default_language", defaults_of("Judge")["default_language"])
    if isinstance(name, str) and isinstance(languages, dict) and isinstance(default, str) and default not in languages:
        report(("quality", "judge", "default_language") if "default_language" in judge else ("quality", "judge"),
               f"default language '{default}' is not among quality.judge.languages "
               f"({', '.join(sorted(languages)) or 'none'}): a prompt in no known language would not be graded",
               key="default_language" not in judge)
    elif isinstance(name, str) and isinstance(languages, dict) and isinstance(default, str):
        spec = languages.get(default)
        spec = spec if isinstance(spec, dict) else {}
        rubrics = spec.get("rubrics") if isinstance(spec.get("rubrics"), dict) else {}
        if not spec.get("instructions") or not rubrics.get(DEFAULT_RUBRIC):  # judging.rubric_for's last resort
            report(("quality", "judge", "languages", default), f"the default language '{default}' needs "
                   f"instructions and a 'default' rubric: a prompt in no language with its own would not be graded",
                   key=True)


def _check_weights(weights: dict, path: tuple, report) -> None:
    # Wrong types and non-finite numbers are reported by the schema step; here only whether the
    # weights can be normalised (they are divided by their sum).
    values = [v for v in weights.values() if _number(v)]
    if values and len(values) == len(weights) and sum(max(0.0, v) for v in values) <= 0:
        report(path, "weights are all zero: at least one factor must weigh more than 0")


# The budget settings only a spend target reads (pacing.PaceRule).
PACING = ("pacing_rate", "max_multiplier", "min_multiplier")

# Alias settings only some strategies read; a strategy lists those it reads as `settings`.
TUNING = ("exploration", "exploration_c", "cost_weight", "latency_weight", "mode_pack", "tier_hint", "lkgp_enabled")


# The `contextual` section's keys only a strategy that reads `contextual` (its `settings`) uses when
# it decides. The section's other keys are read whatever the alias's strategy: `prior_model` seeds the
# models every contextual alias shares (contextual_io.prior_paths), `prior_variance` and
# `noise_variance` are the priors `aisia train --alias` fits with.
CONTEXTUAL_CHOICE = ("exploration", "quality_tolerance", "cold_start")

# What a strategy's `settings` may name: the tuning keys, and the `contextual` section.
STRATEGY_SETTINGS = TUNING + ("contextual",)

# Half-lives that forgetting switched off leaves unread (engine.py: both gammas are 1 then).
HALF_LIVES = (("bandit", "forgetting", "half_life_requests"), ("quality", "half_life_requests"))


def inert_settings(data: dict, locs: Locations, settings_of) -> list[PolicyIssue]:
    """Warnings for settings that are accepted and do nothing: alias settings the alias's
    strategy does not read, a budget's pacing without a target, a half-life with forgetting off.
    `data` is the merged document before defaults (only what a file sets counts);
    `settings_of(strategy)` is the strategy's `settings`, None when it does not say."""
    out = []
    if _map(_map(data.get("bandit")).get("forgetting")).get("enabled") is False:
        for path in HALF_LIVES:
            *parents, key = path
            node = data
            for p in parents:
                node = _map(node.get(p))
            if node.get(key) is not None:
                pos = position_of(locs, path, key=True)
                out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                       pos.column if pos else 0, dotted(path),
                                       "has no effect: bandit.forgetting.enabled is false, so nothing is "
                                       "forgotten; enable forgetting, or remove it", "warning"))
    for name, alias in _map(data.get("aliases")).items():
        if not isinstance(alias, dict) or not isinstance(alias.get("strategy", "ucb1"), str):
            continue
        strategy = alias.get("strategy", "ucb1")
        reads = settings_of(strategy)
        if reads is None:
            continue
        if strategy == "contextual" and alias.get("cost_weight") is not None and _tolerance(alias) > 0 \
                and not _spends_up(alias):
            pos = position_of(locs, ("aliases", name, "cost_weight"), key=True)
            out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                                   dotted(("aliases", name, "cost_weight")),
                                   "has an effect only on decisions a LiteLLM team or key budget paces (they take the "
                                   "highest score, cost bonus included): otherwise, with contextual.quality_tolerance "
                                   "above 0, the contextual choice is the cheapest candidate within the tolerance, "
                                   "and the cost weight only orders candidates of equal price, whose cost bonuses "
                                   "are equal; set the tolerance instead (0: the highest score, where the cost "
                                   "weight counts), or remove it",
                                   "warning"))
        for key in TUNING:
            if alias.get(key) is not None and key not in reads:
                pos = position_of(locs, ("aliases", name, key), key=True)
                used = ", ".join(k for k in TUNING if k in reads) or "none of " + ", ".join(TUNING)
                out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                       pos.column if pos else 0, dotted(("aliases", name, key)),
                                       f"has no effect: strategy '{strategy}' does not read {key} (it reads {used}); "
                                       "remove it, or choose a strategy that uses it", "warning"))
        section = alias.get("contextual")
        for key in CONTEXTUAL_CHOICE if isinstance(section, dict) and "contextual" not in reads else ():
            if section.get(key) is not None:
                path = ("aliases", name, "contextual", key)
                pos = position_of(locs, path, key=True)
                out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                       pos.column if pos else 0, dotted(path),
                                       f"has no effect: strategy '{strategy}' does not read the contextual section's "
                                       f"{key} (only the contextual strategy decides with it; prior_model, "
                                       "prior_variance and noise_variance are read whatever the strategy); remove "
                                       "it, or choose strategy contextual", "warning"))
        budget = alias.get("budget")
        if not (isinstance(budget, dict) and budget.get("target_usd_per_1k_requests") is not None):
            for key in PACING if isinstance(budget, dict) else ():  # how a target moves, without a target
                if budget.get(key) is not None:
                    path = ("aliases", name, "budget", key)
                    pos = position_of(locs, path, key=True)
                    out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0,
                                           pos.column if pos else 0, dotted(path),
                                           "has no effect without budget.target_usd_per_1k_requests (it says how the "
                                           "spend target's multiplier moves); set a target, or remove it", "warning"))
            continue
        if "cost_weight" not in reads:
            why = (f"strategy '{strategy}' does not read cost_weight; choose ucb1, thompson or "
                   "contextual")
        elif _cost_weight(alias, data) == 0 and not (strategy == "contextual" and _tolerance(alias) > 0):
            why = ("the alias's cost weight is 0, and a multiple of 0 is 0; give the alias a cost_weight "
                   "above 0 (the multiplier then scales it)")
        else:
            continue
        path = ("aliases", name, "budget", "target_usd_per_1k_requests")
        pos = position_of(locs, path, key=True)
        out.append(PolicyIssue(pos.file if pos else "<policy>", pos.line if pos else 0, pos.column if pos else 0,
                               dotted(path), f"has no effect: the spend target paces the cost weight, and {why}",
                               "warning"))
    return out


def _tolerance(alias: dict) -> float:
    """A contextual alias's quality tolerance: its own, else the schema's default."""
    own = _map(alias.get("contextual")).get("quality_tolerance")
    if own is None:
        return float(defaults_of("Contextual")["quality_tolerance"])
    return float(own) if _number(own) else 0.0  # a wrong type: the schema step reports it


def _spends_up(alias: dict) -> bool:
    """Whether the alias's spend target may take its multiplier below 0 (budget.min_multiplier < 0),
    where a contextual decision takes the highest score and the cost weight counts."""
    budget = _map(alias.get("budget"))
    if budget.get("target_usd_per_1k_requests") is None:
        return False
    floor = budget.get("min_multiplier")
    floor = defaults_of("Budget")["min_multiplier"] if floor is None else floor
    return _number(floor) and floor < 0


def _cost_weight(alias: dict, data: dict):
    """The cost weight an alias serves with: its own, else the policy's bandit.cost_weight, else
    the schema's default."""
    weight = alias.get("cost_weight")
    if weight is None:
        bandit = data.get("bandit")
        weight = bandit.get("cost_weight") if isinstance(bandit, dict) else None
    return defaults_of("Bandit")["cost_weight"] if weight is None else weight
