"""A deterministic decision matrix for every strategy, in the manner of a combo-matrix
(docs/design.md#names-kept-from-the-sources).

Candidates, deployments and arm statistics are built directly; the context has a seeded rng and
a fixed clock. Discipline: the candidate a scenario expects is always listed SECOND in the pool,
so a pass proves the strategy reordered the pool rather than taking its first entry."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
from helpers import context

from aisia_plugin import plugins
from aisia_plugin.bandit import ArmStats
from aisia_plugin.decision import Candidate, Deployment
from aisia_plugin.policy.models import Sla
from aisia_plugin.weights import DEFAULT_WEIGHTS

NOW = 1_700_000_000.0
ALL = ("cost", "latency", "sla-aware", "lkgp", "rules", "ucb1", "thompson")
RANKING = ("cost", "latency", "sla-aware", "rules")


def stats(pulls=0.0, mean=0.0, avg_latency=5.0, alpha=None, beta=None):
    succ = pulls * mean
    return ArmStats(pulls=pulls, total_reward=succ, avg_latency=avg_latency,
                    alpha=1.0 + succ if alpha is None else alpha, beta=1.0 + pulls - succ if beta is None else beta,
                    count=int(pulls))


def cand(id, *, cost=2.0, p95=2000.0, err=0.0, sd=0.0, breaker="CLOSED", tier=None, provider=None,
         st=None, task_fit=0.5, quota=1.0, signals=None):
    d = Deployment(id=id, model_name="group", model=f"{provider or id}/{id}-model", provider=provider or id,
                   tier=tier, input_cost_per_1m=cost, output_cost_per_1m=cost)
    return Candidate(deployment=d, stats=st if st is not None else stats(), breaker=breaker, p95_latency_ms=p95,
                     latency_stddev_ms=sd, error_rate=err, task_fit=task_fit, quota=quota, signals=signals or {})


def ctx(pool, *, seed=7, strategy="rules", **kw):
    return context(pool, strategy=strategy, seed=seed, now=NOW, **kw)


def pick(name, pool, **kw):
    return plugins.get_strategy(name).select(pool, ctx(pool, strategy=name, **kw))


def good_stats():
    return stats(pulls=100, mean=0.9, avg_latency=0.5)


def bad_stats():
    return stats(pulls=100, mean=0.3, avg_latency=4.0)


def dominant_pool():
    weak = dict(cost=5.0, p95=4000.0, err=0.2, sd=500.0, quota=0.5, task_fit=0.4)
    return [cand("a-weak", st=bad_stats(), **weak),
            cand("b-dominant", cost=0.5, p95=500.0, err=0.0, sd=10.0, st=good_stats(), task_fit=0.9),
            cand("c-weak", st=bad_stats(), **weak)]


# -- every strategy ---------------------------------------------------------------------------------
def test_registry_lists_every_strategy_and_alias():
    names = set(plugins.strategy_names())
    assert {*ALL, "eco", "fast", "sla"} <= names
    assert plugins.get_strategy("eco") is plugins.get_strategy("cost")
    assert plugins.get_strategy("fast") is plugins.get_strategy("latency")
    assert plugins.get_strategy("sla") is plugins.get_strategy("sla-aware")


@pytest.mark.parametrize("name", ALL)
def test_dominant_candidate_wins(name):
    d = pick(name, dominant_pool())
    assert d.deployment_id == "b-dominant", d.reason
    assert "b-dominant" in d.reason
    assert d.candidates_considered == 3


@pytest.mark.parametrize("name", ALL)
def test_all_but_one_open(name):
    # The OPEN ones are better on every metric; only the second is not OPEN.
    pool = [cand("a-open", cost=0.1, p95=100, breaker="OPEN", st=good_stats()),
            cand("b-closed", cost=9.0, p95=9000, err=0.3, sd=900, st=bad_stats()),
            cand("c-open", cost=0.1, p95=100, breaker="OPEN", st=good_stats())]
    d = pick(name, pool, last_known_good="a-open")
    assert d.deployment_id == "b-closed", d.reason


@pytest.mark.parametrize("name", ALL)
def test_all_open_still_decides(name):
    pool = [cand("a-open", cost=3.0, p95=3000, breaker="OPEN", st=bad_stats()),
            cand("b-open", cost=0.5, p95=400, breaker="OPEN", st=good_stats())]
    d = pick(name, pool)
    assert d.deployment_id in {"a-open", "b-open"}
    assert d.reason
    if name != "thompson":
        assert d.deployment_id == "b-open", d.reason


@pytest.mark.parametrize("name", ("cost", "latency", "sla-aware", "lkgp", "rules", "ucb1"))
def test_ties_go_to_pool_order(name):
    pool = [cand("a-first", st=good_stats()), cand("b-second", st=good_stats()), cand("c-third", st=good_stats())]
    assert pick(name, pool).deployment_id == "a-first"


@pytest.mark.parametrize("name", ("cost", "latency"))
def test_half_open_competes_in_cost_and_latency(name):
    # HALF_OPEN is not dropped (it gets probe traffic): the cheaper and faster half-open one wins.
    pool = [cand("a-closed", cost=4.0, p95=3000), cand("b-half", cost=1.0, p95=1000, breaker="HALF_OPEN")]
    assert pick(name, pool).deployment_id == "b-half"


@pytest.mark.parametrize("name", ("rules", "sla-aware", "lkgp"))
def test_half_open_loses_to_an_equal_closed_candidate(name):
    pool = [cand("a-half", breaker="HALF_OPEN"), cand("b-closed")]
    assert pick(name, pool).deployment_id == "b-closed"


# -- exploration (epsilon-greedy) -------------------------------------------------------------------
def explore_pool():
    return [cand("a-cheap", cost=1.0, p95=1000, sd=0), cand("b-best", cost=0.2, p95=200, sd=0),
            cand("c-open", cost=0.1, p95=100, breaker="OPEN"), cand("d-other", cost=3.0, p95=3000, sd=0)]


@pytest.mark.parametrize("name", RANKING)
def test_exploration_with_seed_is_exact(name):
    # random.Random(1): random() = 0.134 < 0.5 -> explore; choice over the three non-OPEN
    # candidates [a, b, d] -> a-cheap. random.Random(0): 0.844 >= 0.5 -> the ranking's b-best.
    d = pick(name, explore_pool(), seed=1, exploration=0.5)
    assert d.deployment_id == "a-cheap"
    assert "exploration" in d.reason and "b-best" in d.reason
    assert d.probability == pytest.approx(0.5 / 3)
    d = pick(name, explore_pool(), seed=0, exploration=0.5)
    assert d.deployment_id == "b-best"
    assert d.probability == pytest.approx(0.5 + 0.5 / 3)


@pytest.mark.parametrize("name", ("cost", "latency", "sla-aware", "lkgp", "rules", "ucb1"))
def test_epsilon_zero_consumes_no_randomness(name):
    pool = explore_pool()
    c = ctx(pool, exploration=0.0)
    before = c.rng.getstate()
    d = plugins.get_strategy(name).select(pool, c)
    assert c.rng.getstate() == before
    # (every arm is untried here, so UCB1 explores the first one in pool order)
    assert d.deployment_id == ("a-cheap" if name == "ucb1" else "b-best")


def test_open_candidate_is_listed_as_excluded():
    d = pick("cost", explore_pool())
    by_id = {s.id: s for s in d.scores}
    assert set(by_id) == {"a-cheap", "b-best", "c-open", "d-other"}
    assert by_id["c-open"].excluded and by_id["c-open"].score is None
    assert by_id["b-best"].score == 1.0 and by_id["a-cheap"].score == pytest.approx(0.2)


# -- sla-aware ---------------------------------------------------------------------------------------
SLA = Sla(target_p95_ms=1500, max_error_rate=0.05, max_cost_per_1m=5.0, hard_constraints=True)


def test_sla_exact_scores():
    """SLA: p95 <= 1500 ms, error rate <= 0.05, cost <= $5/1M, hard constraints. Max stddev 300.

    a-slow  p95 3000, err .01, $1, sd 100, CLOSED:
        latency 1500/3000 = .5; error .05/.01 -> 1; health 1; cost 5/1 -> 1; stability 1-100/300
        score = .35*.5 + .35 + .15 + .10 + .05*(2/3) = .175 + .6 + .033333 = 0.808333
        violation = (3000-1500)/1500 = 1.0
    b-good  p95 1000, err .02, $4, sd 300, CLOSED:
        latency 1; error 1; health 1; cost 5/4 -> 1; stability 0
        score = .35 + .35 + .15 + .10 + 0 = 0.95; violation 0
    c-flaky p95 1200, err .10, $0.5, sd 0, HALF_OPEN:
        latency 1; error .05/.10 = .5; health .5; cost 1; stability 1
        score = .35 + .175 + .075 + .10 + .05 = 0.75; violation (.10-.05)/.05 = 1.0
    """
    pool = [cand("a-slow", cost=1.0, p95=3000, err=0.01, sd=100),
            cand("b-good", cost=4.0, p95=1000, err=0.02, sd=300),
            cand("c-flaky", cost=0.5, p95=1200, err=0.10, sd=0, breaker="HALF_OPEN")]
    d = pick("sla", pool, sla=SLA)
    assert d.deployment_id == "b-good"
    got = {s.id: round(s.score, 4) for s in d.scores}
    assert got == {"a-slow": 0.8083, "b-good": 0.95, "c-flaky": 0.75}
    assert {s.id: s.terms["violation"] for s in d.scores} == {"a-slow": 1.0, "b-good": 0.0, "c-flaky": 1.0}
    assert "meets every SLA limit" in d.reason


def test_sla_hard_constraints_prefer_compliance_over_score():
    """No cost cap; target 1500 ms, max error .05. Costs 0.1 and 10 (max 10), stddev 0.

    p-fast-ish p95 1600, err 0, $0.1: latency 1500/1600 = .9375, error 1, health 1,
        cost 1 - .1/10 = .99, stability 1 -> .328125 + .35 + .15 + .099 + .05 = 0.977125;
        violation (1600-1500)/1500 = 0.0667
    q-compliant p95 1500, err .05, $10: 1, 1, 1, 0, 1 -> .35 + .35 + .15 + 0 + .05 = 0.90; violation 0
    """
    p = cand("p-over", cost=0.1, p95=1600, err=0.0)
    q = cand("q-compliant", cost=10.0, p95=1500, err=0.05)
    hard = Sla(target_p95_ms=1500, max_error_rate=0.05, max_cost_per_1m=None, hard_constraints=True)
    soft = hard.model_copy(update={"hard_constraints": False})
    d = pick("sla-aware", [p, q], sla=hard)
    assert d.deployment_id == "q-compliant"
    assert {s.id: round(s.score, 4) for s in d.scores} == {"p-over": 0.9771, "q-compliant": 0.9}
    d = pick("sla-aware", [q, p], sla=soft)
    assert d.deployment_id == "p-over"
    assert round(d.final_score, 6) == 0.977125


def test_sla_no_compliant_candidate_says_so():
    # target 500, max error .01: x violation (1000-500)/500 + (.02-.01)/.01 = 2.0; y .2 + .5 = 0.7
    sla = Sla(target_p95_ms=500, max_error_rate=0.01, max_cost_per_1m=None, hard_constraints=True)
    pool = [cand("x-worse", p95=1000, err=0.02), cand("y-least", p95=600, err=0.015)]
    d = pick("sla-aware", pool, sla=sla)
    assert d.deployment_id == "y-least"
    assert "no candidate meets every SLA limit; least violating: y-least" in d.reason
    assert {s.id: round(s.terms["violation"], 4) for s in d.scores} == {"x-worse": 2.0, "y-least": 0.7}


def test_sla_defaults_without_sla():
    # Defaults: target 2000 ms, max error .05, no cost cap, soft.
    pool = [cand("a-over", p95=2500), cand("b-within", p95=1900)]
    d = pick("sla-aware", pool, sla=None)
    assert d.deployment_id == "b-within"
    assert {s.id: s.terms["violation"] for s in d.scores} == {"a-over": 0.25, "b-within": 0.0}


# -- lkgp ----------------------------------------------------------------------------------------------
def test_lkgp_pins_to_last_known_good_even_when_rules_disagree():
    pool = dominant_pool()[::-1]  # c-weak, b-dominant, a-weak: rules would pick b-dominant
    pool = [pool[1], pool[0], pool[2]]  # b-dominant first, the pinned c-weak second
    d = pick("lkgp", pool, last_known_good="c-weak")
    assert d.deployment_id == "c-weak"
    assert d.reason.startswith("last known good c-weak")


def test_lkgp_matches_a_provider_name_after_ids():
    pool = [cand("a-x", provider="openai", cost=0.1), cand("b-y", provider="groq", cost=9.0)]
    d = pick("lkgp", pool, last_known_good="groq")
    assert d.deployment_id == "b-y" and "via provider 'groq'" in d.reason


def test_lkgp_never_pins_to_an_open_provider():
    # A stale pin to a dead provider (docs/design.md#lkgp). a-dead is the LKGP and better on paper.
    pool = [cand("a-dead", provider="deadco", cost=0.1, p95=100, breaker="OPEN", st=good_stats()),
            cand("b-alive", provider="aliveco", cost=5.0, p95=3000, st=bad_stats())]
    for lkg in ("a-dead", "deadco"):
        d = pick("lkgp", pool, last_known_good=lkg)
        assert d.deployment_id == "b-alive"
        assert "OPEN" in d.reason and "fell back to rules" in d.reason
        assert d.strategy == "lkgp"


def test_lkgp_disabled_or_unknown_falls_back_to_rules():
    pool = dominant_pool()
    for kw in ({"last_known_good": "c-weak", "lkgp_enabled": False}, {"last_known_good": "gone"}, {}):
        d = pick("lkgp", pool, **kw)
        assert d.deployment_id == "b-dominant"
        assert "fell back to rules" in d.reason


def test_lkgp_uses_the_registered_rules_strategy(monkeypatch):
    # A plugin may replace "rules": lkgp must look it up in the registry, not import it.
    class FakeRules:
        name = "rules"
        description = "always the last candidate"

        def select(self, pool, context):
            return plugins.get_strategy("cost").select(pool[-1:], context)

    real = plugins.get_strategy
    monkeypatch.setattr(plugins, "get_strategy", lambda n: FakeRules() if n == "rules" else real(n))
    d = pick("lkgp", [cand("a", cost=0.1), cand("b", cost=5.0)])
    assert d.deployment_id == "b" and "fell back to rules" in d.reason


# -- rules -----------------------------------------------------------------------------------------------
def test_rules_exact_two_factor_score():
    # weights cost_inv .6, health .4. a: cost_inv 1 - 2/2 = 0, health 1 -> 0.4
    # b: cost_inv 1 - 1/2 = .5, health .5 (HALF_OPEN) -> .3 + .2 = 0.5
    w = {k: 0.0 for k in DEFAULT_WEIGHTS} | {"cost_inv": 0.6, "health": 0.4}
    pool = [cand("a-closed", cost=2.0), cand("b-half", cost=1.0, breaker="HALF_OPEN")]
    d = pick("rules", pool, weights=w)
    assert d.deployment_id == "b-half"
    assert {s.id: round(s.score, 4) for s in d.scores} == {"a-closed": 0.4, "b-half": 0.5}
    terms = d.scores[1].terms
    assert terms["cost_inv"] == 0.5 and terms["health"] == 0.5 and len(terms) == 16


def test_rules_tier_hint_and_specificity():
    w = {k: 0.0 for k in DEFAULT_WEIGHTS} | {"tier_affinity": 1.0}
    pool = [cand("a-ultra", tier="ultra"), cand("b-pro", tier="pro"), cand("c-free", tier="free")]
    d = pick("rules", pool, weights=w, tier_hint="pro")
    assert d.deployment_id == "b-pro"
    assert [s.terms["tier_affinity"] for s in d.scores] == [0.7, 1.0, 0.3]
    w = {k: 0.0 for k in DEFAULT_WEIGHTS} | {"specificity_match": 1.0}
    c = ctx(pool, weights=w)
    c.features = SimpleNamespace(specificity=0.1)  # a generic request: the free tier matches best
    d = plugins.get_strategy("rules").select([pool[0], pool[2], pool[1]], c)
    assert d.deployment_id == "c-free"
    assert [round(s.terms["specificity_match"], 4) for s in d.scores] == [0.1, 0.9, 0.43]


def test_rules_without_weights_uses_defaults():
    pool = dominant_pool()
    c = ctx(pool, weights={})
    assert plugins.get_strategy("rules").select(pool, c).deployment_id == "b-dominant"


# -- ucb1 and thompson -----------------------------------------------------------------------------------
def test_ucb1_reproduces_the_aisia_seed_example():
    """The worked example of docs/design.md#ucb1: N = 100, C = sqrt 2, cost weight .1, latency weight .15.

    exploration = sqrt2 * sqrt(ln 100 / n): .4292 (n 50), .5541 (n 30), .6786 (n 20)
    Cerebras .85 + .4292 + (1 - .2/10)*.1 = .098 + (1 - 1/30)*.15 = .145   -> 1.5222
    OpenAI   .90 + .5541 + (1 - 5/10)*.1 = .050  + (1 - 10/30)*.15 = .100  -> 1.6041
    Groq     .80 + .6786 + (1 - .3/10)*.1 = .097 + (1 - 2/30)*.15 = .140   -> 1.7156
    The seed's printed table says 1.523 / 1.570 / 1.637 because its exploration column (0.43,
    0.52, 0.60) does not follow from its own formula (docs/design.md#sources); Groq is chosen either way.
    These are the counts as the decision sees them. With forgetting on (the shipped default,
    half-life 1000 requests), counts recorded 100 requests before the decision are discounted by
    2 ** -0.1: n and N shrink, exploration grows, and the scores become 1.5340 / 1.6193 / 1.7342
    (test_explain.py shows both through `aisia explain`, which says when forgetting is on).
    """
    def arm(id, pulls, mean, cost, lat):
        d = Deployment(id=id, model_name="auto", model=f"{id}/m", provider=id, input_cost_per_1m=cost,
                       output_cost_per_1m=cost)
        return Candidate(deployment=d, stats=ArmStats(pulls=pulls, total_reward=pulls * mean, avg_latency=lat, count=int(pulls)))

    pool = [arm("cerebras", 50, 0.85, 0.2, 1.0), arm("groq", 20, 0.80, 0.3, 2.0), arm("openai", 30, 0.90, 5.0, 10.0)]
    c = ctx(pool, total_pulls=100, exploration_c=math.sqrt(2), cost_weight=0.1, latency_weight=0.15)
    d = plugins.get_strategy("ucb1").select(pool, c)
    assert d.deployment_id == "groq"
    assert {s.id: round(s.score, 4) for s in d.scores} == {"cerebras": 1.5222, "groq": 1.7156, "openai": 1.6041}


def test_ucb1_cold_start_tries_the_untried_first():
    pool = [cand("a-tried", st=good_stats()), cand("b-untried"), cand("c-untried")]
    d = pick("ucb1", pool)
    assert d.deployment_id == "b-untried" and "never been tried" in d.reason
    assert d.scores[1].score == math.inf


def test_thompson_cold_start_is_exact_with_a_seed():
    pool = [cand("a", cost=2.0), cand("b", cost=2.0), cand("c", cost=2.0)]
    # Independent replay of the documented draw order: one Beta(1, 1) draw per candidate in pool
    # order (bandit.beta_sample: Beta(1, 1) is one uniform draw); equal bonuses, so the largest
    # draw wins.
    for seed in range(5):
        r = random.Random(seed)
        draws = [r.random() for _ in pool]
        expected = pool[draws.index(max(draws))].id
        assert pick("thompson", pool, seed=seed).deployment_id == expected
    assert pick("thompson", pool, seed=2).deployment_id == pick("thompson", pool, seed=2).deployment_id


def test_thompson_dominant_and_half_open():
    pool = [cand("a-weak", st=stats(alpha=10, beta=990)), cand("b-strong", st=stats(alpha=990, beta=10), breaker="HALF_OPEN")]
    for seed in range(20):
        assert pick("thompson", pool, seed=seed).deployment_id == "b-strong"


def test_thompson_bonuses_are_a_policy_switch(tmp_path):
    """Issue 11, finding 12: bandit.thompson_bonuses (default true, the seed's reading) adds the
    cost and latency bonuses to the Beta draws; false ranks on the draws alone."""
    import random as _random

    from aisia_plugin.decision import Deployment
    from aisia_plugin.engine import Engine
    from aisia_plugin.policy import load_policy

    pool = [Deployment(id="dear-1", model_name="dear-1", model="x/dear", provider="x", input_cost_per_1m=0.0,
                       output_cost_per_1m=0.0),
            Deployment(id="free-1", model_name="free-1", model="y/free", provider="y", input_cost_per_1m=0.0,
                       output_cost_per_1m=0.0)]
    msg = [{"role": "user", "content": "hello"}]

    def rows(flag):
        f = tmp_path / f"p{flag}.yaml"
        f.write_text(f"version: 1\nbandit: {{thompson_bonuses: {str(flag).lower()}}}\n"
                     "aliases:\n  auto/t: {strategy: thompson, cost_weight: 0.5, latency_weight: 0.5}\n", encoding="utf-8")
        pol = load_policy([f])
        assert pol.bandit.thompson_bonuses is flag
        d = Engine(pol, clock=lambda: 0.0, rng=_random.Random(3)).decide("auto/t", msg, pool)
        return {s.id: s.terms for s in d.scores}

    on, off = rows(True), rows(False)
    assert all(t["bonus"] > 0 for t in on.values())
    assert all(t["bonus"] == 0 for t in off.values())
    assert load_policy().bandit.thompson_bonuses is True


def test_specificity_match_is_neutral_without_a_tier():
    """Issue 11, finding 11: a deployment without a tier scored 0.67 or 0 (as 'standard')
    instead of the documented neutral 0.5."""
    from aisia_plugin.strategies.rules import specificity_match

    assert specificity_match(None, 0.0) == specificity_match(None, 1.0) == 0.5
    assert specificity_match("pro", None) == 0.5
    assert specificity_match("free", 0.0) == 1.0 and specificity_match("ultra", 0.0) == 0.0
