"""The whole pipeline (features -> domain -> candidates -> specialists -> breaker -> budget ->
strategy) and learning from outcomes, with an injected clock and seed.

As in a combo-matrix (docs/design.md#names-kept-from-the-sources), the candidate a scenario expects
is listed second, so that a pass proves the pipeline reordered the pool rather than taking the first
entry."""

from __future__ import annotations

import dataclasses
import random
import textwrap

import pytest

from helpers import deployment
from aisia_plugin.engine import Engine, UnknownAlias
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


dep = deployment


@pytest.fixture
def policy_file(tmp_path):
    def make(extra: str = ""):
        (tmp_path / "aliases.yaml").write_text(textwrap.dedent("""
            version: 1
            aliases:
              auto: {strategy: ucb1}
              auto/cheap: {strategy: cost}
              auto/strict: {strategy: cost, budget: {max_cost_per_request_usd: 0.0001, mode: strict}}
              auto/soft: {strategy: ucb1, budget: {max_cost_per_request_usd: 0.0001, mode: soft}}
              auto/coding: {strategy: ucb1, domain_hint: coding}
            domains:
              definitions:
                coding: {patterns: ['\\bpython\\b', '\\bfunction\\b']}
                translation: {patterns: ['\\btranslate\\b']}
            """) + textwrap.dedent(extra))
        return load_policy([tmp_path / "aliases.yaml"])
    return make


MSG = [{"role": "user", "content": "hello there"}]


def engine_for(policy, clock=None, seed=7):
    return Engine(policy, clock=clock or Clock(), rng=random.Random(seed))


def test_cold_start_tries_every_candidate_once_then_exploits(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("a-1"), dep("b-1"), dep("c-1")]
    seen = []
    for _ in range(3):
        d = eng.decide("auto", MSG, pool)
        seen.append(d.deployment_id)
        eng.record(d, Outcome(d.deployment_id, success=True, latency_s=1.0, quality=0.9 if d.deployment_id == "b-1" else 0.2))
    assert seen == ["a-1", "b-1", "c-1"]
    d = eng.decide("auto", MSG, pool)
    assert d.deployment_id == "b-1"
    assert "UCB1 picked b-1" in d.reason
    assert {s.id for s in d.scores} == {"a-1", "b-1", "c-1"}


def test_specialist_present_competes_alone_and_serves_its_model(policy_file):
    pol = policy_file()
    eng = engine_for(pol)
    pool = [dep("a-gen"), dep("b-coder", specialities={"coding": "b/deepseek-coder-v2"}), dep("c-gen")]
    d = eng.decide("auto", [{"role": "user", "content": "write a python function"}], pool)
    assert d.domain == "coding"
    assert d.deployment_id == "b-coder"
    assert d.model == "b/deepseek-coder-v2"
    excluded = {s.id: s.excluded for s in d.scores if s.excluded}
    assert excluded == {"a-gen": "not a coding specialist", "c-gen": "not a coding specialist"}


def test_specialist_absent_everyone_competes(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("a-gen"), dep("b-coder", specialities={"coding": None})]
    d = eng.decide("auto", [{"role": "user", "content": "please translate this"}], pool)
    assert d.domain == "translation"
    assert d.deployment_id == "a-gen"  # untried, first in pool order
    assert not any(s.excluded for s in d.scores)


def test_open_breaker_excluded_until_timeout_then_half_open_probe(policy_file):
    clock = Clock()
    eng = engine_for(policy_file(), clock)
    pool = [dep("a-1"), dep("b-1")]
    for _ in range(5):
        eng.record("auto", Outcome("a-1", success=False, status_code=503, latency_s=0.1))
    d = eng.decide("auto/cheap", MSG, pool)
    assert d.deployment_id == "b-1"
    assert {s.id: s.excluded for s in d.scores if s.excluded} == {"a-1": "circuit OPEN"}
    clock.t += 61  # past timeout_s: a-1 reads HALF_OPEN and may take a probe
    d = eng.decide("auto/cheap", MSG, [dep("a-1", cost=0.1), dep("b-1")])
    assert d.deployment_id == "a-1"
    assert eng.store.breaker("a-1").probes_in_flight == 1
    for _ in range(3):
        eng.record("auto/cheap", Outcome("a-1", success=True, latency_s=0.1))
    assert eng.store.breaker("a-1").state == "CLOSED"


def test_all_open_still_serves_and_says_so(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("a-1"), dep("b-1", cost=0.5)]
    for id in ("a-1", "b-1"):
        for _ in range(5):
            eng.record("auto", Outcome(id, success=False, status_code=500))
    d = eng.decide("auto/cheap", MSG, pool)
    assert d.deployment_id == "b-1"
    assert "serving anyway" in d.reason


def test_client_errors_never_open_a_breaker_nor_teach_the_bandit(policy_file):
    eng = engine_for(policy_file())
    for _ in range(50):
        assert eng.record("auto", Outcome("a-1", success=False, status_code=400, message="bad request")) is None
    assert eng.store.breaker("a-1").state == "CLOSED"
    assert eng.store.arm("a-1") is None


def test_rate_limit_skips_the_deployment_for_retry_after(policy_file):
    clock = Clock()
    eng = engine_for(policy_file(), clock)
    eng.record("auto", Outcome("a-1", success=False, status_code=429, retry_after_s=30))
    d = eng.decide("auto/cheap", MSG, [dep("b-1", cost=5), dep("a-1", cost=0.1)])
    assert d.deployment_id == "b-1"
    assert "rate limited" in {s.id: s.excluded for s in d.scores if s.excluded}["a-1"]
    clock.t += 31
    assert eng.decide("auto/cheap", MSG, [dep("b-1", cost=5), dep("a-1", cost=0.1)]).deployment_id == "a-1"


def test_strict_budget_refuses_with_402_and_soft_budget_takes_cheapest(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("a-1", cost=50.0), dep("b-1", cost=10.0)]
    d = eng.decide("auto/strict", MSG, pool)
    assert d.deployment_id is None and d.refused == "budget" and d.status_code == 402
    d = eng.decide("auto/soft", MSG, pool)
    assert d.deployment_id == "b-1"


def test_failed_attempts_are_excluded_on_retry(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("a-1", cost=0.1), dep("b-1", cost=1.0)]
    d = eng.decide("auto/cheap", MSG, pool, exclude={"a-1"})
    assert d.deployment_id == "b-1"
    assert {s.id: s.excluded for s in d.scores if s.excluded} == {"a-1": "already failed for this request"}


def test_a_deployment_left_out_says_why(policy_file):
    """Left out for its LiteLLM rate limit, a deployment's row says so, not "already failed"
    (what the proxy's filter hands the engine: id -> why)."""
    eng = engine_for(policy_file())
    pool = [dep("a-1", cost=0.1), dep("b-1", cost=1.0), dep("c-1", cost=2.0)]
    d = eng.decide("auto/cheap", MSG, pool, exclude={"a-1": "at its LiteLLM rate limit: rpm 10 of 10",
                                                     "b-1": "already failed for this request"})
    assert d.deployment_id == "c-1"
    assert {s.id: s.excluded for s in d.scores if s.excluded} == {
        "a-1": "at its LiteLLM rate limit: rpm 10 of 10", "b-1": "already failed for this request"}


def test_unknown_alias_raises(policy_file):
    with pytest.raises(UnknownAlias):
        engine_for(policy_file()).decide("auto/nope", MSG, [dep("a-1")])


def test_per_domain_learning_separates_coding_from_translation(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("a-1"), dep("b-1")]
    code = [{"role": "user", "content": "python function please"}]
    trans = [{"role": "user", "content": "translate this please"}]
    for _ in range(30):
        for msgs, good in ((code, "b-1"), (trans, "a-1")):
            d = eng.decide("auto", msgs, pool)
            eng.record(d, Outcome(d.deployment_id, success=True, latency_s=1.0,
                                  quality=1.0 if d.deployment_id == good else 0.0))
    assert eng.store.arm("b-1", "coding").mean_reward > 0.9
    assert eng.store.arm("a-1", "coding").mean_reward < 0.1
    picks = {"coding": [], "translation": []}
    for _ in range(20):
        for msgs, dom in ((code, "coding"), (trans, "translation")):
            d = eng.decide("auto", msgs, pool)
            picks[dom].append(d.deployment_id)
            eng.record(d, Outcome(d.deployment_id, success=True, latency_s=1.0,
                                  quality=1.0 if d.deployment_id == ("b-1" if dom == "coding" else "a-1") else 0.0))
    assert picks["coding"].count("b-1") >= 15
    assert picks["translation"].count("a-1") >= 15


def test_forgetting_lets_a_degraded_provider_be_left(policy_file):
    eng = engine_for(policy_file("""
        bandit:
          forgetting: {enabled: true, half_life_requests: 50}
    """))
    pool = [dep("a-1"), dep("b-1")]
    quality = {"a-1": 0.6, "b-1": 0.9}
    for _ in range(400):
        d = eng.decide("auto", MSG, pool)
        eng.record(d, Outcome(d.deployment_id, success=True, latency_s=1.0, quality=quality[d.deployment_id]))
    quality["b-1"] = 0.1  # b-1 degrades
    picks = []
    for _ in range(200):
        d = eng.decide("auto", MSG, pool)
        picks.append(d.deployment_id)
        eng.record(d, Outcome(d.deployment_id, success=True, latency_s=1.0, quality=quality[d.deployment_id]))
    assert picks[-100:].count("a-1") > 80


def test_decision_rows_built_on_read_are_complete_and_stable(policy_file):
    # The strategy's rows are built when first read; the engine's exclusions follow them.
    eng = engine_for(policy_file())
    deps = [dep("a-x", cost=5.0), dep("b-y", cost=0.5), dep("c-z", cost=1.0)]
    d = eng.decide("auto/cheap", MSG, deps, exclude=["c-z"])
    assert d.deployment_id == "b-y" and d.final_score == 1.0
    first = d.as_dict()["candidates"]
    assert [r["id"] for r in first] == ["a-x", "b-y", "c-z"]
    assert first[0]["score"] == pytest.approx(0.1) and first[1]["score"] == 1.0
    assert first[2]["excluded"] == "already failed for this request"
    assert d.as_dict()["candidates"] == first and d.scores is d.scores
    d.add_scores([])
    assert len(d.scores) == 3


def test_read_pool_answers_a_decision_in_one_call(policy_file):
    eng = engine_for(policy_file())
    deps = [dep("a-x"), dep("b-y")]
    d = eng.decide("auto", [{"role": "user", "content": "write a python function"}], deps)
    eng.record(d, Outcome(d.deployment_id, success=False, status_code=503))
    read = eng.store.read_pool(["b-y", "a-x", "nope"], "coding", "auto")  # a PoolState, read by name
    breakers, g, dom = read.breakers, read.global_arms, read.domain_arms
    assert read.tick == 1.0 and breakers[2] is None and g[2] is None and dom[2] is None
    assert read.last_known_good is None
    failed = ["b-y", "a-x"].index(d.deployment_id)
    assert breakers[failed].failures == 1 and breakers[1 - failed] is None
    assert g[failed].pulls == 1.0 and dom[failed] is not None and dom[failed].pulls == 1.0
    assert eng.store.read_pool(["a-x"], None, None).domain_arms == [None]


def test_retry_without_the_failed_specialist_falls_back_to_everyone(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("a-gen"), dep("b-coder", specialities={"coding": "b/coder"})]
    msg = [{"role": "user", "content": "write a python function"}]
    assert eng.decide("auto", msg, pool).deployment_id == "b-coder"
    d = eng.decide("auto", msg, pool, exclude=["b-coder"])
    assert d.deployment_id == "a-gen" and d.model == "a/a-gen"
    assert {s.id: s.excluded for s in d.scores if s.excluded} == {"b-coder": "already failed for this request"}
    # The memoised pools are untouched by a retry's own.
    assert eng.decide("auto", msg, pool).deployment_id == "b-coder"


def test_a_changed_deployment_list_is_seen_at_once(policy_file):
    # The alias's pool is memoised per deployment list; replacing a member of the same list object
    # (same length, same ends) must still be seen.
    eng = engine_for(policy_file())
    pool = [dep("a-1", cost=5.0), dep("b-1", cost=3.0), dep("c-1", cost=4.0)]
    assert eng.decide("auto/cheap", MSG, pool).deployment_id == "b-1"
    pool[1] = dep("z-1", cost=0.1)
    d = eng.decide("auto/cheap", MSG, pool)
    assert d.deployment_id == "z-1" and [s.id for s in d.scores] == ["a-1", "z-1", "c-1"]
    pool.append(dep("y-1", cost=0.01))
    assert eng.decide("auto/cheap", MSG, pool).deployment_id == "y-1"


def test_reason_is_formatted_on_first_read_and_can_be_amended(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("a-1", cost=5.0), dep("b-1", cost=0.5)]
    d = eng.decide("auto/cheap", MSG, pool)
    assert not isinstance(d._reason, str)  # nothing formatted yet
    assert d.reason == "cost picked b-1: cheapest at $0.5 per 1M tokens (next cheapest $5)"
    assert d.reason is d.reason and d.as_dict()["reason"] == d.reason
    d.reason += "; amended"
    assert d.reason.endswith("; amended")


def test_a_dead_specialist_falls_back_to_the_generalists(policy_file):
    """Issue 11, finding 3: the only coding specialist's breaker is OPEN; the generalists compete
    (as after a retry past a failed specialist) instead of the dead deployment being served."""
    clock = Clock()
    eng = engine_for(policy_file(), clock)
    pool = [dep("a-gen", cost=2.0), dep("b-coder", specialities={"coding": "b/coder"}), dep("c-gen", cost=1.0)]
    msg = [{"role": "user", "content": "write a python function"}]
    for _ in range(5):
        eng.record(eng.decide("auto", msg, pool), Outcome("b-coder", success=False, status_code=503))
    d = eng.decide("auto/cheap", msg, pool)
    assert d.domain == "coding" and d.deployment_id == "c-gen" and d.model == "c/c-gen"
    assert "serving anyway" not in d.reason
    rows = {s.id: s.excluded for s in d.scores}
    assert rows["b-coder"] == "circuit OPEN (every coding specialist is blocked: the generalists compete)"
    assert rows["a-gen"] is None and rows["c-gen"] is None
    # Past the breaker's timeout the specialist is probed again, alone.
    clock.t += eng.policy.circuit_breaker.timeout_s + 1
    d = eng.decide("auto/cheap", msg, pool)
    assert d.deployment_id == "b-coder" and d.probe


def test_a_dead_specialist_with_no_generalist_is_still_served(policy_file):
    eng = engine_for(policy_file())
    pool = [dep("b-coder", specialities={"coding": None})]
    msg = [{"role": "user", "content": "write a python function"}]
    for _ in range(5):
        eng.record(eng.decide("auto", msg, pool), Outcome("b-coder", success=False, status_code=503))
    d = eng.decide("auto", msg, pool)
    assert d.deployment_id == "b-coder" and d.reason.endswith("(every candidate's breaker blocks it: serving anyway)")


def test_rules_weights_near_the_float_maximum_still_rank(tmp_path):
    """Issue 11, finding 7: weights of 1e308 validate; their sum used to overflow, every share
    became 0 and the first candidate won."""
    f = tmp_path / "p.yaml"
    f.write_text(textwrap.dedent("""
        version: 1
        mode_packs:
          huge: {weights: {cost_inv: 1.0e+308, latency_inv: 1.0e+308}}
        aliases:
          auto/rules: {strategy: rules, mode_pack: huge}
        """), encoding="utf-8")
    d = engine_for(load_policy([f])).decide("auto/rules", MSG, [dep("a-1", cost=5.0), dep("b-1", cost=0.5)])
    assert d.deployment_id == "b-1" and d.final_score > 0


def test_quota_and_signals_reach_the_rules_strategy(tmp_path):
    """Issue 11, finding 4: the caller's quota and signals are the pool's, not their defaults."""
    f = tmp_path / "p.yaml"
    f.write_text(textwrap.dedent("""
        version: 1
        mode_packs:
          quota-only: {weights: {quota: 1}}
          session: {weights: {session_availability: 1, cost_inv: 0.1}}
        aliases:
          auto/quota: {strategy: rules, mode_pack: quota-only}
          auto/session: {strategy: rules, mode_pack: session}
        """), encoding="utf-8")
    eng = engine_for(load_policy([f]))
    pool = [dep("a-1"), dep("b-1")]
    d = eng.decide("auto/quota", MSG, pool, signals={"a-1": {"quota": 0.1}, "b-1": {"quota": 0.9}})
    assert d.deployment_id == "b-1" and d.final_score == pytest.approx(0.9)
    d = eng.decide("auto/quota", MSG, pool, signals={"a-1": {"quota": 0.8}})  # b-1 unknown: full quota
    assert d.deployment_id == "b-1" and d.final_score == pytest.approx(1.0)
    cheap = [dep("a-1", cost=5.0), dep("b-1", cost=0.1)]
    d = eng.decide("auto/session", MSG, cheap, signals={"a-1": {"session_availability": 1.0},
                                                        "b-1": {"session_availability": 0.0}})
    assert d.deployment_id == "a-1"
    assert eng.decide("auto/session", MSG, cheap).deployment_id == "b-1"  # defaults: cost decides


@pytest.mark.parametrize("strategy", ["ucb1", "thompson"])
def test_exploration_is_an_epsilon_floor_for_the_bandits(tmp_path, strategy):
    """Issue 11, finding 6: `exploration` on a bandit alias used to be accepted and ignored."""
    f = tmp_path / "p.yaml"
    f.write_text(f"version: 1\naliases:\n  auto/e: {{strategy: {strategy}, exploration: 0.5}}\n"
                 f"  auto/g: {{strategy: {strategy}}}\n", encoding="utf-8")
    eng = engine_for(load_policy([f]))
    pool = [dep("a-1"), dep("b-1"), dep("c-1")]
    for _ in range(30):  # b-1 is clearly the best arm
        for d in pool:
            eng.record("auto/e", Outcome(d.id, success=True, latency_s=1.0, quality=0.95 if d.id == "b-1" else 0.05))
    greedy = {eng.decide("auto/g", MSG, pool).deployment_id for _ in range(50)}
    assert greedy == {"b-1"}
    picks = [eng.decide("auto/e", MSG, pool) for _ in range(200)]
    chosen = {d.deployment_id for d in picks}
    assert chosen == {"a-1", "b-1", "c-1"}
    explored = [d for d in picks if d.deployment_id != "b-1"]
    assert all(d.reason.startswith("exploration (epsilon 0.5) chose ") for d in explored)
    assert 0.2 < len(explored) / len(picks) < 0.5  # epsilon 0.5, two of three random picks miss b-1


def test_lkgp_names_why_its_last_known_good_cannot_serve(policy_file):
    """Issue 11, finding 11: an OPEN last known good was said to be 'not in the pool'."""
    eng = engine_for(policy_file())
    pool = [dep("a-1"), dep("b-1")]
    d = eng.decide("auto/lkgp", MSG, pool)
    eng.record(d, Outcome(d.deployment_id, success=True, latency_s=0.5, quality=0.9))
    pinned = d.deployment_id
    assert eng.decide("auto/lkgp", MSG, pool).deployment_id == pinned
    for _ in range(5):
        eng.record("auto", Outcome(pinned, success=False, status_code=503))
    d = eng.decide("auto/lkgp", MSG, pool)
    assert d.deployment_id != pinned
    assert f"last known good {pinned!r} may not take this request (see its row)" in d.reason
    assert {s.id: s.excluded for s in d.scores}[pinned] == "circuit OPEN"


def test_a_prompt_no_specialist_can_hold_goes_to_a_generalist_that_can(policy_file):
    """The specialists of the domain compete alone, unless none of them can hold the prompt: then
    the generalists compete (those whose window holds it), as when every specialist is blocked;
    a prompt the specialist holds still goes to it, and when no generalist holds it either, the
    largest window is served alone (LiteLLM's own context-window error or fallbacks follow)."""
    eng = engine_for(policy_file())
    pool = [dep("a-gen", cost=2.0, max_input_tokens=128_000), dep("b-coder", specialities={"coding": "b/coder"},
                                                                      max_input_tokens=8_000),
            dep("c-gen", cost=1.0, max_input_tokens=4_000)]
    long_code = [{"role": "user", "content": "write a python function that reads this log: " + "server started ok " * 9000}]
    d = eng.decide("auto/cheap", long_code, pool)
    assert d.domain == "coding" and d.deployment_id == "a-gen" and d.model == "a/a-gen"
    rows = {s.id: s.excluded for s in d.scores}
    need = int(rows["c-gen"].rsplit(" ", 1)[1])
    assert 8_000 < need < 128_000
    assert rows["b-coder"] == (f"context window of 8000 tokens, prompt about {need} "
                               f"(no coding specialist holds the prompt: the generalists compete)")
    assert rows["c-gen"] == f"context window of 4000 tokens, prompt about {need}"
    assert rows["a-gen"] is None
    short = [{"role": "user", "content": "write a python function"}]
    assert eng.decide("auto/cheap", short, pool).deployment_id == "b-coder"
    # No generalist holds it either: the specialist's pool, its largest window alone.
    small = [dataclasses.replace(pool[0], max_input_tokens=2_000), pool[1], pool[2]]
    d = eng.decide("auto/cheap", long_code, small)
    assert d.deployment_id == "b-coder"
    assert {s.id: s.excluded for s in d.scores}["a-gen"] == "not a coding specialist"
