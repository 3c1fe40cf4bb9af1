"""A policy that validates loads in the engine and decides (issue 11, finding 2), for every
policy hypothesis generates: odd numbers at the schema's edges, mode packs, domain patterns that
RE2 accepts or rejects, hints, budgets, selectors."""

from __future__ import annotations

import random

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.plugins import strategy_names
from aisia_plugin.policy import PolicyError, load_policy
from aisia_plugin.policy.models import FACTORS

STRATEGIES = sorted(strategy_names())
GOOD_PATTERNS = ["\\bpython\\b", "\\bdef\\b", "code", "a*", "(?:x|)", "\\w{0,50}", "é+", "^hello", "(?i)SQL",
                 "\\d+ times", "\\b\\w{3,9}ing\\b"]
BAD_PATTERNS = ["[", "(a)\\1"]
DOMAINS = ["coding", "math", "legal"]

# Values the schema accepts, at its edges (weights up to the float maximum), and one field that
# may hold anything.
numbers = st.one_of(st.floats(min_value=0, max_value=1), st.sampled_from([0, 1e-300, 2.0, 5e-324]))
weight_values = numbers | st.sampled_from([1e308, 1.7976931348623157e308])
wild = st.floats(allow_nan=True, allow_infinity=True)
# A pattern RE2 rejects, in one domain out of about ten.
patterns = st.lists(st.sampled_from(GOOD_PATTERNS), min_size=1, max_size=4) | st.lists(
    st.sampled_from(GOOD_PATTERNS + BAD_PATTERNS), min_size=1, max_size=2)
weights = st.dictionaries(st.sampled_from(FACTORS), weight_values, min_size=1, max_size=5)
domain = st.fixed_dictionaries({"patterns": st.one_of(*[st.lists(st.sampled_from(GOOD_PATTERNS), min_size=1,
                                                                                  max_size=4)] * 9, patterns)},
                                optional={"weight": st.sampled_from([0.5, 1, 4, 100])})
domains = st.fixed_dictionaries({name: domain for name in DOMAINS})
alias = st.fixed_dictionaries({"strategy": st.sampled_from(STRATEGIES)}, optional={
    "exploration": st.floats(0, 1), "exploration_c": numbers, "cost_weight": numbers, "latency_weight": numbers,
    "mode_pack": st.sampled_from(["p1", "p2"]), "domain_hint": st.sampled_from(DOMAINS),
    "task_hint": st.sampled_from(["coding", "review", "default"]), "tier_hint": st.sampled_from(["pro", "free"]),
    "budget": st.fixed_dictionaries({"max_cost_per_request_usd": st.sampled_from([None, 0, 1e-9, 1.0]),
                                     "mode": st.sampled_from(["soft", "strict"])}),
    "failover": st.fixed_dictionaries({"attempts": st.integers(1, 10)}),
    "candidates": st.fixed_dictionaries({}, optional={"locality": st.sampled_from(["any", "local", "remote"]),
                                                      "tiers": st.lists(st.sampled_from(["pro", "free"]), max_size=2)}),
})
policies = st.fixed_dictionaries({
    "version": st.just(1), "defaults": st.booleans(),
    "aliases": st.dictionaries(st.sampled_from(["auto", "auto/x", "auto/y"]), alias, min_size=1, max_size=3),
    "mode_packs": st.fixed_dictionaries({"p1": st.fixed_dictionaries({"weights": weights}),
                                         "p2": st.fixed_dictionaries({"weights": weights})}),
    "domains": st.fixed_dictionaries({"definitions": domains}, optional={
        "min_matches": st.integers(1, 5), "max_scan_chars": st.sampled_from([256, 2048, 100000])}),
}, optional={
    "rules": st.fixed_dictionaries({"weights": weights}),
    "bandit": st.fixed_dictionaries({}, optional={"exploration_c": numbers, "cost_weight": numbers,
                                                  "latency_weight": numbers, "cost_scale_per_1m": wild,
                                                  "latency_scale_s": numbers}),
})

POOL = [Deployment(id="a-1", model_name="a-1", model="openai/gpt-4o", provider="openai", tier="pro",
                   input_cost_per_1m=5.0, output_cost_per_1m=15.0, specialities={"coding": None}),
        Deployment(id="b-1", model_name="b-1", model="ollama/llama3", provider="ollama", tier="free", local=True,
                   input_cost_per_1m=0.0, output_cost_per_1m=0.0),
        Deployment(id="c-1", model_name="c-1", model="groq/llama-3.1-8b", provider="groq",
                   input_cost_per_1m=0.3, output_cost_per_1m=0.3, specialities={"math": "groq/math"})]
PROMPTS = ["write a python function: def sort(x)", "hello", "prove that 2 + 2 = 4 by calculating " * 30]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(policies)
def test_a_policy_that_validates_builds_an_engine_that_decides(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("p") / "policy.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    try:
        policy = load_policy([path])
    except PolicyError as exc:
        assert exc.issues and all(i.file for i in exc.issues)
        return
    engine = Engine(policy, clock=lambda: 0.0, rng=random.Random(0))
    for name in policy.aliases:
        for prompt in PROMPTS:
            d = engine.decide(name, [{"role": "user", "content": prompt}], POOL)
            assert d.refused or d.deployment_id in {p.id for p in POOL}
