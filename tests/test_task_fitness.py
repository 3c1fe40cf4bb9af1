"""Task fitness: most specific glob wins (never insertion order), provider prefixes are stripped,
wildcard boosts for unknown models, clamping, caching; and weights normalisation / mode packs."""

from __future__ import annotations

import math

import pytest

from aisia_plugin.policy import load_policy
from aisia_plugin.policy.models import FACTORS, TaskFitness
from aisia_plugin.task_fitness import TaskFitnessTable
from aisia_plugin.weights import DEFAULT_WEIGHTS, normalise, weights_for_alias


@pytest.fixture(scope="module")
def policy():
    return load_policy()


@pytest.fixture(scope="module")
def table(policy):
    return TaskFitnessTable(policy.task_fitness)


def cfg(models, boosts=(), default=0.5):
    return TaskFitness(default=default, models=models, boosts=list(boosts))


def test_gpt_4o_mini_gets_its_own_row_not_gpt_4o(table):
    # The source's substring-in-insertion-order lookup (docs/design.md#task-fitness) gives gpt-4o-mini gpt-4o's 0.90.
    assert table.fitness("gpt-4o-mini", "coding") == pytest.approx(0.80)
    assert table.fitness("gpt-4o-mini", "documentation") == pytest.approx(0.82)
    assert table.fitness("gpt-4o", "coding") == pytest.approx(0.90)
    assert table.pattern_for("gpt-4o-mini") == "gpt-4o-mini"


@pytest.mark.parametrize("order", [("gpt-4o*", "gpt-4o-mini"), ("gpt-4o-mini", "gpt-4o*")])
def test_most_specific_pattern_wins_whatever_the_insertion_order(order):
    rows = {"gpt-4o*": {"coding": 0.9}, "gpt-4o-mini": {"coding": 0.8}}
    t = TaskFitnessTable(cfg({p: rows[p] for p in order}))
    assert t.fitness("gpt-4o-mini", "coding") == pytest.approx(0.8)
    assert t.fitness("gpt-4o-2024-08-06", "coding") == pytest.approx(0.9)


def test_provider_prefix_is_stripped_and_matching_is_case_insensitive(table):
    assert table.fitness("openai/gpt-4o-mini", "coding") == pytest.approx(0.80)
    assert table.fitness("azure/openai/gpt-4o", "review") == pytest.approx(0.88)
    assert table.fitness("OpenAI/GPT-4o-Mini", "coding") == pytest.approx(0.80)
    assert table.fitness("anthropic/claude-3-5-sonnet-20241022", "coding") == pytest.approx(0.95)
    assert table.fitness("groq/llama-3.1-70b", "coding") == pytest.approx(0.72)
    assert table.fitness("deepseek/deepseek-coder-v2", "debugging") == pytest.approx(0.88)


def test_known_models_get_no_boosts(table):
    # deepseek-coder contains "coder" and "code" but is in the table: the row decides.
    assert table.fitness("deepseek-coder", "coding") == pytest.approx(0.90)


def test_wildcard_boosts_for_unknown_models(table):
    # default 0.5 + "coder" 0.15 + "code" 0.10 (both substrings of "coder") = 0.75
    assert table.fitness("acme/my-coder", "coding") == pytest.approx(0.75)
    # the boosts are for coding only
    assert table.fitness("acme/my-coder", "review") == pytest.approx(0.5)
    # 0.5 + coder .15 + code .10 + fast .05 = 0.80; "thinking": planning/analysis +0.10
    assert table.fitness("fast-coder-thinking", "coding") == pytest.approx(0.80)
    assert table.fitness("fast-coder-thinking", "planning") == pytest.approx(0.60)
    assert table.fitness("qwen-thinking", "analysis") == pytest.approx(0.60)
    assert table.fitness("qwen-thinking", "coding") == pytest.approx(0.5)
    # boosts look at the model name, not the provider prefix
    assert table.fitness("codehost/plain-model", "coding") == pytest.approx(0.5)
    assert table.fitness("totally-unknown", "debugging") == pytest.approx(0.5)


def test_missing_task_uses_row_default_then_table_default():
    t = TaskFitnessTable(cfg({"m-a": {"coding": 0.9, "default": 0.6}, "m-b": {"coding": 0.9}}, default=0.4))
    assert t.fitness("m-a", "review") == pytest.approx(0.6)
    assert t.fitness("m-b", "review") == pytest.approx(0.4)
    assert t.fitness("m-b", "CODING") == pytest.approx(0.9)


def test_clamping():
    boosts = [{"contains": "big", "tasks": [], "boost": 0.4}, {"contains": "bigger", "tasks": ["coding"], "boost": 0.4},
              {"contains": "neg", "tasks": [], "boost": -2.0}]
    t = TaskFitnessTable(cfg({"over": {"coding": 1.7}, "under": {"coding": -0.3}}, boosts))
    assert t.fitness("bigger-model", "coding") == 1.0  # 0.5 + 0.4 + 0.4, clamped
    assert t.fitness("bigger-model", "review") == pytest.approx(0.9)  # empty tasks = every task
    assert t.fitness("neg-model", "coding") == 0.0
    assert t.fitness("over", "coding") == 1.0
    assert t.fitness("under", "coding") == 0.0


def test_cache_is_bounded_and_consistent():
    t = TaskFitnessTable(cfg({"gpt-4o": {"coding": 0.9}}), cache_size=3)
    for i in range(10):
        assert t.fitness(f"x-{i}", "coding") == 0.5
        assert 1 <= t.cached <= 3
    assert t.fitness("gpt-4o", "coding") == t.fitness("gpt-4o", "coding") == pytest.approx(0.9)
    # One cache with one bound, whichever way it is read and however many tasks (issue 11, the house).
    for i in range(10):
        assert t.fitness_of(["gpt-4o", f"y-{i}"], f"task-{i}") == [pytest.approx(0.5), 0.5]
        assert 1 <= t.cached <= 3
    assert t.fitness_of(["gpt-4o", "z"], "coding") == [t.fitness("gpt-4o", "coding"), 0.5]


# -- weights ---------------------------------------------------------------------------------------
def test_normalise_drops_bad_weights_and_sums_to_one():
    w = normalise({"quota": 2.0, "health": -1.0, "cost_inv": math.nan, "latency_inv": math.inf, "task_fit": 2.0,
                   "not_a_factor": 5.0}, DEFAULT_WEIGHTS)
    assert set(w) == set(FACTORS)
    assert w["quota"] == w["task_fit"] == 0.5
    assert w["health"] == w["cost_inv"] == w["latency_inv"] == 0.0


def test_normalise_falls_back_when_nothing_is_positive():
    fb = {"health": 3.0, "quota": 1.0}
    w = normalise({"quota": 0.0, "health": -2.0}, fb)
    assert w["health"] == 0.75 and w["quota"] == 0.25 and sum(w.values()) == pytest.approx(1.0)
    assert sum(normalise({}, None).values()) == pytest.approx(1.0)


def test_mode_pack_replaces_weights_wholesale(policy):
    fast = weights_for_alias(policy, policy.aliases["auto/offline"].model_copy(update={"mode_pack": "ship-fast"}))
    assert set(fast) == set(FACTORS)
    assert fast["latency_inv"] == pytest.approx(0.3048)
    assert fast["tier_affinity"] == fast["specificity_match"] == fast["reset_window_affinity"] == 0.0
    plain = weights_for_alias(policy, policy.aliases["auto"])
    assert plain == pytest.approx(policy.rules.weights.model_dump())
    assert plain["health"] == pytest.approx(0.1605)


@pytest.mark.parametrize("model,family", [("openai/gpt-4o-2024-08-06", "gpt-4o"), ("gpt-4o-2024-11-20", "gpt-4o"),
                                          ("gpt-4o-mini-2024-07-18", "gpt-4o-mini")])
def test_dated_model_names_score_as_their_family(policy, model, family):
    """Issue 11, finding 11: gpt-4o-2024-08-06 used to get the table's default 0.5."""
    table = TaskFitnessTable(policy.task_fitness)
    assert table.fitness_of([model], "coding") == table.fitness_of([family], "coding") != [policy.task_fitness.default]
