"""LiteLLM's own routing strategies, driven offline through benchmarks/litellm_baselines.py."""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from litellm_baselines import (  # noqa: E402
    STRATEGIES,
    LiteLLMBaseline,
    NoDeploymentAvailable,
)

import litellm  # noqa: E402  (imported after the module above set the offline env flags)

MSGS = [{"role": "user", "content": "Summarise the plot of Hamlet in two sentences."}]

POOL = [
    {"id": "gpt-4o", "input_cost_per_1m": 2.5, "output_cost_per_1m": 10.0},
    {"id": "claude-sonnet", "input_cost_per_1m": 3.0, "output_cost_per_1m": 15.0},
    {"id": "deepseek-chat", "input_cost_per_1m": 0.27, "output_cost_per_1m": 1.1},
]


@pytest.fixture
def make():
    created: list[LiteLLMBaseline] = []

    def factory(strategy: str, candidates=POOL, **kwargs) -> LiteLLMBaseline:
        b = LiteLLMBaseline(strategy, candidates, **kwargs)
        created.append(b)
        return b

    yield factory
    for b in created:
        b.close()


def _fail(b: LiteLLMBaseline, cid: str, now: float, times: int = 5, status: int = 500) -> float:
    for _ in range(times):
        now += 0.01
        b.record(cid, now=now, latency_s=0.05, success=False, status_code=status)
    return now


# ------------------------------------------------------------------------------------------
# construction
# ------------------------------------------------------------------------------------------
def test_rejects_unknown_strategy_and_bad_candidates():
    with pytest.raises(ValueError):
        LiteLLMBaseline("round-robin", POOL)
    with pytest.raises(ValueError):
        LiteLLMBaseline("simple-shuffle", [])
    with pytest.raises(ValueError):
        LiteLLMBaseline("simple-shuffle", [{"id": "a"}, {"id": "a"}])


def test_builds_fake_openai_deployments_with_prices(make):
    b = make("cost-based-routing")
    deps = {d["model_info"]["id"]: d for d in b.router.get_model_list(model_name="aisia-litellm-baseline")}
    assert set(deps) == {"gpt-4o", "claude-sonnet", "deepseek-chat"}
    p = deps["gpt-4o"]["litellm_params"]
    assert p["model"] == "openai/gpt-4o"
    assert p["api_base"] == "http://127.0.0.1:9/v1"
    assert p["input_cost_per_token"] == pytest.approx(2.5e-6)
    assert p["output_cost_per_token"] == pytest.approx(10e-6)


def test_does_not_leave_callbacks_in_litellm_globals(make):
    lists = ("callbacks", "success_callback", "failure_callback", "_async_success_callback",
             "_async_failure_callback", "input_callback")
    before = {name: len(getattr(litellm, name)) for name in lists}
    for strategy in STRATEGIES:
        make(strategy)
    after = {name: len(getattr(litellm, name)) for name in lists}
    assert after == before


def test_unknown_candidate_in_record(make):
    b = make("simple-shuffle")
    with pytest.raises(KeyError):
        b.record("nope", now=1.0, latency_s=0.1, success=True)


# ------------------------------------------------------------------------------------------
# the strategies
# ------------------------------------------------------------------------------------------
def test_simple_shuffle_spreads_fairly(make):
    b = make("simple-shuffle", seed=7)
    counts = Counter()
    now = 0.0
    for _ in range(300):
        now += 0.2
        cid = b.choose(MSGS, now)
        counts[cid] += 1
        b.record(cid, now=now + 0.1, latency_s=0.1, success=True, input_tokens=12, output_tokens=30)
    assert set(counts) == {c["id"] for c in POOL}
    # each expected 100 (binomial sd ~8.2); 70 is > 3.5 sd away
    assert min(counts.values()) >= 70, counts


def test_simple_shuffle_respects_weights(make):
    pool = [{"id": "heavy", "weight": 9}, {"id": "light", "weight": 1}]
    b = make("simple-shuffle", candidates=pool, seed=3)
    counts = Counter(b.choose(MSGS, float(i)) for i in range(500))
    assert counts["heavy"] > 3 * counts["light"] > 0


def test_seed_makes_choices_reproducible_without_touching_global_random(make):
    state = random.getstate()
    a = make("simple-shuffle", seed=42)
    b = make("simple-shuffle", seed=42)
    seq_a = [a.choose(MSGS, float(i)) for i in range(50)]
    seq_b = [b.choose(MSGS, float(i)) for i in range(50)]
    assert seq_a == seq_b
    assert len(set(seq_a)) == 3
    assert random.getstate() == state


def test_latency_based_routing_converges_on_fastest(make):
    b = make("latency-based-routing", seed=1)
    latency = {"gpt-4o": 0.9, "claude-sonnet": 2.0, "deepseek-chat": 0.3}
    rng = random.Random(0)
    picks = []
    now = 0.0
    for _ in range(200):
        now += 1.0
        cid = b.choose(MSGS, now)
        picks.append(cid)
        lat = latency[cid] * rng.uniform(0.9, 1.1)
        b.record(cid, now=now + lat, latency_s=lat, success=True, input_tokens=20, output_tokens=50)
    assert set(picks[:10]) == set(latency)  # LiteLLM tries every unmeasured deployment first
    assert picks[-150:] == ["deepseek-chat"] * 150


def test_latency_based_routing_penalises_timeouts(make):
    b = make("latency-based-routing", seed=1, cooldown_time=0.001)
    latency = {"gpt-4o": 0.9, "claude-sonnet": 2.0, "deepseek-chat": 0.3}
    now = 0.0
    for _ in range(30):
        now += 1.0
        cid = b.choose(MSGS, now)
        b.record(cid, now=now, latency_s=latency[cid], success=True, output_tokens=50)
    assert b.choose(MSGS, now + 1.0) == "deepseek-chat"
    # a 408 is mapped to litellm.Timeout: LiteLLM appends a 1000 s latency to its window
    b.record("deepseek-chat", now=now + 1.5, latency_s=30.0, success=False, status_code=408)
    assert b.choose(MSGS, now + 10.0) == "gpt-4o"


def test_cost_based_routing_picks_cheapest(make):
    b = make("cost-based-routing", seed=1)
    now = 0.0
    picks = Counter()
    for _ in range(100):
        now += 0.5
        cid = b.choose(MSGS, now)
        picks[cid] += 1
        b.record(cid, now=now, latency_s=0.4, success=True, input_tokens=100, output_tokens=100)
    assert picks == Counter({"deepseek-chat": 100})


def test_cost_based_routing_treats_zero_price_as_unpriced(make):
    # LiteLLM quirk kept on purpose: a 0 price is falsy, so LiteLLM falls back to its 5.0/token default
    pool = [{"id": "free", "input_cost_per_1m": 0, "output_cost_per_1m": 0},
            {"id": "cheap", "input_cost_per_1m": 0.1, "output_cost_per_1m": 0.1}]
    assert make("cost-based-routing", candidates=pool).choose(MSGS, 1.0) == "cheap"
    pool[0] = {"id": "free", "input_cost_per_1m": 1e-9, "output_cost_per_1m": 1e-9}
    assert make("cost-based-routing", candidates=pool).choose(MSGS, 1.0) == "free"


# ------------------------------------------------------------------------------------------
# cooldowns on the simulated clock
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_failures_cool_a_deployment_down_until_its_time_passes(make, strategy):
    b = make(strategy, seed=11)  # LiteLLM's default cooldown_time: 5 s
    target = "deepseek-chat"
    now = _fail(b, target, 100.0, times=5, status=500)  # 100 % of >= 5 requests this minute
    assert b.cooled_down(now) == [target]
    during = [b.choose(MSGS, now + 0.1 + i * 0.02) for i in range(100)]
    assert target not in during
    assert b.cooled_down(now + 4.9) == [target]
    assert b.cooled_down(now + 5.1) == []
    if strategy == "simple-shuffle":
        after = Counter(b.choose(MSGS, now + 5.2 + i * 0.01) for i in range(100))
        assert after[target] > 10
    elif strategy == "cost-based-routing":
        assert b.choose(MSGS, now + 5.2) == target


def test_fewer_failures_than_threshold_do_not_cool_down(make):
    b = make("cost-based-routing")
    now = _fail(b, "deepseek-chat", 10.0, times=4)  # fewer than 5 requests this minute
    assert b.cooled_down(now) == []
    assert b.choose(MSGS, now + 0.1) == "deepseek-chat"


@pytest.mark.parametrize("exact", [False, True])
def test_failure_rate_below_half_does_not_cool_down(make, exact):
    # exact=True runs Router.deployment_callback_on_success in full; the default shortcut must agree
    b = make("cost-based-routing", exact_success_callback=exact)
    now = 10.0
    for _ in range(6):
        now += 0.1
        b.record("deepseek-chat", now=now, latency_s=0.1, success=True, input_tokens=10, output_tokens=10)
    now = _fail(b, "deepseek-chat", now, times=5)  # 5 / 11 < 50 %
    assert b.cooled_down(now) == []
    now = _fail(b, "deepseek-chat", now, times=2)  # 7 / 13 > 50 %
    assert b.cooled_down(now) == ["deepseek-chat"]


def test_rate_limit_cools_down_immediately_and_honours_retry_after(make):
    b = make("cost-based-routing")
    b.record("deepseek-chat", now=50.0, latency_s=0.2, success=False, status_code=429, retry_after_s=30)
    assert b.cooled_down(50.0) == ["deepseek-chat"]
    assert b.choose(MSGS, 60.0) == "gpt-4o"  # next cheapest (2.5 + 10 per 1M)
    assert b.choose(MSGS, 79.0) == "gpt-4o"
    assert b.choose(MSGS, 81.0) == "deepseek-chat"


def test_custom_cooldown_time(make):
    b = make("cost-based-routing", cooldown_time=60)
    now = _fail(b, "deepseek-chat", 0.0)
    assert b.choose(MSGS, now + 59.0) == "gpt-4o"
    assert b.choose(MSGS, now + 61.0) == "deepseek-chat"


def test_allowed_fails(make):
    b = make("cost-based-routing", allowed_fails=1)
    b.record("deepseek-chat", now=1.0, latency_s=0.1, success=False, status_code=503)
    assert b.cooled_down(1.0) == []
    b.record("deepseek-chat", now=1.1, latency_s=0.1, success=False, status_code=503)
    assert b.cooled_down(1.1) == ["deepseek-chat"]


def test_non_retryable_client_errors_do_not_cool_down(make):
    b = make("cost-based-routing")
    now = _fail(b, "deepseek-chat", 0.0, times=6, status=400)  # LiteLLM never cools down on 400
    assert b.cooled_down(now) == []


def test_cooldown_follows_simulated_not_real_time(make):
    b = make("cost-based-routing", cooldown_time=0.2)
    b.record("deepseek-chat", now=1000.0, latency_s=0.1, success=False, status_code=429)
    time.sleep(0.35)  # real time passes the 0.2 s cooldown, simulated time does not
    assert b.choose(MSGS, 1000.1) == "gpt-4o"
    # and simulated time can jump far ahead of real time
    assert b.choose(MSGS, 1000.3) == "deepseek-chat"


def test_every_candidate_cooling_down_raises(make):
    b = make("simple-shuffle")
    for c in POOL:
        b.record(c["id"], now=5.0, latency_s=0.1, success=False, status_code=429)
    with pytest.raises(NoDeploymentAvailable) as info:
        b.choose(MSGS, 6.0)
    assert set(info.value.cooldown_ids) == {c["id"] for c in POOL}
    assert b.choose(MSGS, 11.0) in {c["id"] for c in POOL}


# ------------------------------------------------------------------------------------------
# plumbing
# ------------------------------------------------------------------------------------------
def test_closed_baseline_refuses_calls():
    b = LiteLLMBaseline("latency-based-routing", POOL)
    b.close()
    b.close()
    with pytest.raises(RuntimeError):
        b.choose(MSGS, 1.0)
