"""Team budgets paced, and no tenant moving another's pacing (docs/security.md#tenants).

The issue's reproduction first: three 540 KB prompts from one key (each costing ~34 x the
spend target per request) pushed ``auto/paced``'s multiplier from 0 to its maximum and the next
20 calls of another tenant went to the cheapest deployment. Here: one call moves the multiplier by
at most rate x MAX_STEP whatever its cost, and a team's calls move only its own record."""

from __future__ import annotations

import random
import textwrap

import pytest

from helpers import deployment
from aisia_plugin.engine import Engine
from aisia_plugin.outcome import Outcome
from aisia_plugin.pacing import (BY_BUDGET, BY_TARGET, BUDGET_BAND, BUDGET_RESERVE, MAX_CARRY, MAX_STEP, BudgetStatus, PaceRule, TeamPace, alias_of, budget_multiplier,
                                 dual_step, pace_key, team_multiplier)
from aisia_plugin.policy import load_policy

TARGET = 2.0  # USD per 1,000 requests
POOL = [deployment("cheap-small", 0.2), deployment("dear-large", 9.0)]
MSG = [{"role": "user", "content": "summarise the quarterly report"}]
# A 540 KB prompt is ~135k tokens: at $9 per 1M tokens, $1.2 a call, 600 x the $0.002 target.
HUGE = 1.2


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def engine(tmp_path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent(f"""
        version: 1
        aliases:
          auto/paced: {{strategy: ucb1, budget: {{target_usd_per_1k_requests: {TARGET}}}}}
        """))
    eng = Engine(load_policy([tmp_path / "p.yaml"]), clock=Clock(), rng=random.Random(3))
    # Warm: both deployments known, the dear one the better (its answers graded 0.9, the cheap 0.5),
    # and spend on target, so the multiplier sits at 0 and the dear one is chosen.
    for i in range(40):
        for dep, q in (("cheap-small", 0.5), ("dear-large", 0.9)):
            eng.record("auto/paced", Outcome(dep, success=True, latency_s=0.5, quality=q))
    return eng


def choices(eng, n=20, team=None):
    out = []
    for _ in range(n):
        d = eng.decide("auto/paced", MSG, POOL, team=team)
        out.append(d.deployment_id)
    return out


def test_three_huge_calls_move_the_alias_multiplier_by_a_bounded_step_only(engine):
    before = choices(engine)
    assert before.count("dear-large") == 20
    for _ in range(3):  # one key's three 540 KB prompts, each answered by the dear deployment
        engine.record("auto/paced", Outcome("dear-large", success=True, latency_s=2.0, cost_usd=HUGE))
    m = engine.store.pace("auto/paced").multiplier
    # Fresh record at 1, then three steps of at most rate x MAX_STEP each (rate 1): 13, not 100.
    assert m == pytest.approx(1.0 + 3 * MAX_STEP) and m < 100.0 / 5
    # What they overspent beyond that was carried (capped at MAX_CARRY, shared): calls on target
    # after them count it, and the multiplier stops at 1 + 3 x 4 + 32 = 45, not 100.
    for _ in range(10):
        engine.record("auto/paced", Outcome("dear-large", success=True, latency_s=2.0, cost_usd=TARGET / 1000.0))
    assert engine.store.pace("auto/paced").multiplier == pytest.approx(1.0 + 3 * MAX_STEP + MAX_CARRY)
    # The callers of no team share the alias's record: they feel the bounded move (the cost term at
    # 13 x outweighs this pool's quality gap); a team's calls do not (the next test).


def test_one_teams_huge_calls_leave_another_teams_multiplier_and_choices_unchanged(engine):
    hostile, other = TeamPace("team-hostile"), TeamPace("team-b")
    before = choices(engine, team=other)
    for _ in range(3):
        engine.record("auto/paced", Outcome("dear-large", success=True, latency_s=2.0, cost_usd=HUGE),
                      team="team-hostile")
    assert engine.store.pace(pace_key("auto/paced", "team-hostile")).multiplier == pytest.approx(1.0 + 3 * MAX_STEP)
    assert engine.store.pace(pace_key("auto/paced", "team-b")) is None
    assert engine.store.pace("auto/paced").count == 0  # the no-team record is untouched too
    assert choices(engine, team=other) == before
    # The hostile team's own calls do feel it (its own record, its own budget).
    d = engine.decide("auto/paced", MSG, POOL, team=hostile)
    assert d.deployment_id in {"cheap-small", "dear-large"}


def test_the_step_is_capped_and_below_the_cap_it_is_the_dual_step():
    rule = PaceRule(TARGET, rate=1.0, max_multiplier=100.0)
    assert dual_step(0.0, HUGE, rule).multiplier == MAX_STEP
    assert dual_step(0.0, 0.006, rule).multiplier == pytest.approx(2.0)  # (6 - 2) / 2, under the cap: exact
    assert dual_step(0.0, 0.0, rule).multiplier == 0.0  # floor 0


def test_pace_keys_name_their_alias():
    assert pace_key("auto/paced", None) == "auto/paced" and pace_key("auto/paced", "") == "auto/paced"
    k = pace_key("auto/paced", "t:1|x")
    assert k == "auto/paced|team:t:1|x" and alias_of(k) == "auto/paced" and alias_of("auto") == "auto"


@pytest.mark.parametrize("spend,elapsed,want", [
    (10.0, 0.5, 0.0),                     # 40 % of budget behind the line: quality first
    (50.0 - 100 * BUDGET_BAND, 0.5, 0.0),  # exactly BUDGET_BAND behind: still the floor
    (50.0 - 100 * BUDGET_RESERVE, 0.5, 100.0),
    (44.0, 0.5, 50.0),                    # half-way into the band
    (48.0, 0.5, 100.0),                   # BUDGET_RESERVE behind the line: the cheapest
    (50.0, 0.5, 100.0),                   # on the line: the cheapest
    (90.0, 0.5, 100.0),                   # ahead: the cheapest
])
def test_the_budget_multiplier_rises_through_the_band_to_the_line(spend, elapsed, want):
    assert budget_multiplier(BudgetStatus(100.0, spend, elapsed), 0.0, 100.0) == pytest.approx(want)


def test_a_team_applies_the_larger_of_its_record_and_its_budgets():
    rule = PaceRule(TARGET, max_multiplier=100.0)
    behind, ahead = BudgetStatus(100.0, 0.0, 0.9), BudgetStatus(100.0, 95.0, 0.9)
    assert team_multiplier(None, rule, (behind,), 0.0, 100.0) == (1.0, BY_TARGET)  # the fresh record's 1
    assert team_multiplier(None, rule, (behind, ahead), 0.0, 100.0) == (100.0, BY_BUDGET)
    assert team_multiplier(None, None, (behind,), 0.0, 100.0) == (0.0, BY_BUDGET)  # no target: the budget alone
    assert team_multiplier(None, None, (), 0.0, 100.0) == (1.0, None)


def test_a_team_over_its_budget_pace_gets_the_cheap_deployment_one_behind_the_dear_one(engine):
    ahead = TeamPace("team-a", (BudgetStatus(100.0, 60.0, 0.5),))
    behind = TeamPace("team-b", (BudgetStatus(100.0, 10.0, 0.5),))
    assert set(choices(engine, 10, team=ahead)) == {"cheap-small"}
    assert set(choices(engine, 10, team=behind)) == {"dear-large"}


# -- LiteLLM's fields (aisia_plugin/litellm/team_budget.py), on LiteLLM's own auth object ------------
def test_the_team_and_key_budgets_are_read_from_litellms_auth_object():
    from datetime import datetime, timedelta, timezone

    from litellm.proxy._types import UserAPIKeyAuth
    from litellm.types.proxy.carried_budget_state import TeamBudgetSnapshot

    from aisia_plugin.litellm.team_budget import team_budget_of, team_id_of, team_pace_of

    now = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)
    auth = UserAPIKeyAuth(api_key="sk-x", team_id="team-a", team_max_budget=100.0, team_spend=60.0,
                          team_metadata={"budget_duration": "1d"}, max_budget=10.0, spend=1.0,
                          budget_duration="7d", budget_reset_at=now + timedelta(days=6))
    auth.team_budget_snapshot = TeamBudgetSnapshot(budget_reset_at=now + timedelta(hours=12), max_budget=100.0)
    pace = team_pace_of(auth, now.timestamp())
    assert team_id_of(auth) == "team-a" and pace.team == "team-a"
    team, key = pace.budgets
    assert team == BudgetStatus(100.0, 60.0, 0.5)  # half of the day gone, 60 % spent: 10 % ahead
    assert key.max_budget == 10.0 and key.elapsed == pytest.approx(1 / 7)
    # No period known (custom auth without a duration): paced as if the period ended now.
    bare = UserAPIKeyAuth(api_key="sk-y", team_id="t", team_max_budget=50.0, team_spend=5.0)
    assert team_budget_of(bare, now.timestamp()) == BudgetStatus(50.0, 5.0, 1.0)
    # No team, no budget: not paced per team; a budget that is no positive number: none.
    assert team_pace_of(UserAPIKeyAuth(api_key="sk-z"), now.timestamp()) is None
    assert team_pace_of(UserAPIKeyAuth(api_key="sk-z", team_id="t", team_max_budget=0.0), 0.0) == TeamPace("t", ())


# -- the floor: the cheapest tier a paced decision may lean to (budget.floor_tier) ---------------------
def test_a_paced_decision_keeps_the_candidates_at_or_above_the_floor_tier(tmp_path):
    from aisia_plugin.pacing import above_floor

    assert above_floor(["free", "pro", None, "standard"], "standard") == [1, 2, 3]
    assert above_floor(["free", "free"], "pro") == [0, 1]  # none would be left: every one stays
    assert above_floor(["free"], None) == [0]
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""
        version: 1
        aliases:
          auto/floor: {strategy: ucb1, budget: {floor_tier: standard}}
        """))
    eng = Engine(load_policy([tmp_path / "p.yaml"]), clock=Clock(), rng=random.Random(3))
    pool = [deployment("cheap-small", 0.2, tier="free"), deployment("mid-one", 2.0, tier="standard"),
            deployment("dear-large", 9.0, tier="ultra")]
    ahead = TeamPace("team-a", (BudgetStatus(100.0, 90.0, 0.5),))  # far ahead: the cheapest allowed
    got = {eng.decide("auto/floor", MSG, pool, team=ahead).deployment_id for _ in range(12)}
    assert "cheap-small" not in got and got
    d = eng.decide("auto/floor", MSG, pool, team=ahead)
    assert any(s.excluded == "below the budget's floor tier standard" for s in d.scores if s.id == "cheap-small")
    # Not paced (no team budget, no target): the floor does not apply.
    d = eng.decide("auto/floor", MSG, pool)
    assert not any(s.excluded for s in d.scores) and {s.id for s in d.scores} >= {"cheap-small"}
