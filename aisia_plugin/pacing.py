"""Spend pacing: the multiplier on the cost term that keeps an alias's spend at its target.

An alias with ``budget.target_usd_per_1k_requests`` (T) has one shared record, updated by every
recorded outcome of the alias that states its cost c (USD). The multiplier lambda is the
Lagrange multiplier of the constraint "mean spend per request <= T / 1000", learned by the dual
(sub)gradient step budgeted bandits use, normalised by the target so that the rate has no unit:

    lambda <- clamp(lambda + rate * (1000 c - T) / T, min_multiplier, max_multiplier)

and every strategy that reads the cost weight reads ``cost_weight * lambda`` instead
(``decision.RoutingContext.cost_weight``). Why it meets the target: summed over any W
consecutive outcomes during which lambda touches neither bound, the steps telescope,

    (spend of the W outcomes) / (W T / 1000) - 1 = (lambda_end - lambda_start) / (rate W),

so the realised spend of the window is within (max_multiplier - min_multiplier) / (rate W) of the
target (10 % at W = 1,000 with the schema's defaults, rate 1, max_multiplier 100 and
min_multiplier 0), whatever the router does.
The range is wide because the seed's cost bonus, (1 - price / cost_scale_per_1m) * cost_weight,
separates cheap deployments by little (at the default $10 scale, $0.2 and $0.9 per 1M tokens
differ by 0.07 of the weight): the multiplier must be able to make that difference outweigh a
quality gap. Where
lambda sits at 0 the target is not binding (the best quality spends less); where it sits at
max_multiplier the target is below what the cheapest choices the cost term can buy spend.

The floor min_multiplier says which constraint the target is. At 0 (the default) it is a cap,
"mean spend <= T", whose multiplier is >= 0: an alias whose best predicted quality costs less
spends less. Below 0 it is "mean spend = T" (a budget to be used): a negative lambda turns the
cost bonus into a bonus for the dearer deployments, so spend rises to the target too, and the
window bound above holds in both directions while lambda stays inside [min, max].

Bounded: lambda never leaves [min_multiplier, max_multiplier], and one call moves it by at most
``rate * MAX_STEP`` (4 with the defaults) at once and ``rate * (MAX_STEP + MAX_CARRY)`` (36) in
all, whatever its cost: a call's relative overspend, plus what earlier calls carried, is counted up
to MAX_STEP, and the rest, up to MAX_CARRY (32), is carried to the calls after it
(``PaceState.carry``), where their own over- or underspend is added to it. So three 540 KB prompts
from one key move it by 12 at once and by at most 44 of its 100 in all, not to its maximum
(docs/security.md), and a price change moves it to a bound over several calls, never to a value
the cost term cannot come back from. The telescoping bound above holds, the carry's change added
to lambda's, for every window in which the carry never reached MAX_CARRY: a call costing up to
(1 + MAX_STEP + MAX_CARRY) = 37 x the target counts in full. (Without the carry, a call dearer
than 5 x the target counted as 5 x: on the replay traces the dearest deployment's long prompts
exceed that, and UCB1 overspent its targets by 10-16 %.) A cost that is not a finite number >= 0
changes nothing.

Per team: the record is kept per pace key, the alias alone for a call of no team and
``alias|team:ID`` (:func:`pace_key`) for a call of team ID, so one team's calls move only its own
multiplier (an alias name cannot hold ``|``: the schema's alias pattern). A team's (or key's)
LiteLLM budget adds a second multiplier, :func:`budget_multiplier`, from how far its spend runs
ahead of "budget x elapsed share of its period"; a decision applies the larger of the two
(:func:`team_multiplier`).

The record also keeps the realised spend per 1,000 outcomes, a running mean over the last
``SPEND_WINDOW`` outcomes (exactly the mean of all of them before that many), the exact count,
the total spend and the time of the last update. Pure: the time comes in with the outcome (the
store's clock), nothing here reads a clock or does I/O. The Redis store repeats :func:`pace`
step by step in ``state/lua/common.lua`` (``pace_update``); a test holds the two equal."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

from .schema_defaults import defaults_of

_BUDGET = defaults_of("Budget")
# Outcomes the realised spend is averaged over (the window of 1,000 requests).
SPEND_WINDOW = 1000.0
# The largest relative overspend one call counts for at once: one call moves the multiplier by at
# most rate * MAX_STEP (state/scripts.py hands it to the Redis scripts).
MAX_STEP = 4.0
# The most overspend held over for the next calls (``PaceState.carry``): a dear call's excess over
# MAX_STEP is counted with the calls after it instead of lost (lost, it let a target that the
# deployments' dearest calls exceed 5 times be overspent by 10-16 %), so one call moves the
# multiplier by at most rate * (MAX_STEP + MAX_CARRY) in all. Why 8 steps: on the replay traces
# the dearest calls cost up to about 30 x a low target; at 2 or 4 steps contextual still overspent
# the degrade trace's lowest target by 12.7 / 11.4 % over a window, at 8 by 6.6 %.
MAX_CARRY = 8.0 * MAX_STEP
# A team's pace key: the alias, the separator, the team id (state/scripts.py hands it to
# lua/record.lua, which splits it alike).
TEAM_SEPARATOR = "|team:"
# How far behind "budget x elapsed share" (a share of the budget) a team's spend may run before its
# budget makes the cost count at all: the budget multiplier rises linearly from the alias's floor
# at BUDGET_BAND behind the pace line to its max_multiplier at BUDGET_RESERVE behind it (a reserve,
# so that the period ends under its budget rather than on it, where LiteLLM refuses).
BUDGET_BAND = 0.10
BUDGET_RESERVE = 0.02
PACE_FIELDS = ("multiplier", "spend_per_1k", "count", "spend_usd", "updated", "carry")


@dataclass(frozen=True, slots=True)
class PaceRule:
    """An alias's spend target and how the multiplier moves towards it (``budget.*``)."""

    target_usd_per_1k: float
    rate: float = float(_BUDGET["pacing_rate"])
    max_multiplier: float = float(_BUDGET["max_multiplier"])
    min_multiplier: float = float(_BUDGET["min_multiplier"])


@dataclass(frozen=True, slots=True)
class PaceState:
    """One alias's pacing record. A fresh record's multiplier is 1: the cost weight as configured."""

    multiplier: float = 1.0
    spend_per_1k: float = 0.0  # realised spend per 1,000 outcomes, over the last SPEND_WINDOW
    count: float = 0.0  # outcomes counted (exact)
    spend_usd: float = 0.0  # their total cost
    updated: float = 0.0  # the store's time of the last update (seconds)
    carry: float = 0.0  # relative overspend not yet counted (dual_step), in [0, MAX_CARRY]


FRESH = PaceState()


def clamp(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


class Step(NamedTuple):
    """What one paced outcome leaves (``dual_step``): the new multiplier, and the overspend not
    yet counted in it (``PaceState.carry``, at most MAX_CARRY), counted by the next outcomes."""

    multiplier: float
    carry: float


def dual_step(multiplier: float, cost_usd: float, rule: PaceRule, carry: float = 0.0) -> Step:
    """The multiplier after one outcome costing `cost_usd`, and the overspend carried on: the
    call's relative overspend plus the carry is counted up to MAX_STEP, the rest (up to
    MAX_CARRY) is carried to the next call."""
    target = rule.target_usd_per_1k
    over = (1000.0 * cost_usd - target) / target + carry
    counted = over if over < MAX_STEP else MAX_STEP
    rest = over - counted
    return Step(clamp(multiplier + rule.rate * counted, rule.min_multiplier, rule.max_multiplier),
                rest if rest < MAX_CARRY else MAX_CARRY)


def pace(state: Optional[PaceState], rule: PaceRule, cost_usd, now: float) -> PaceState:
    """The record after one outcome costing `cost_usd` at time `now` (the state unchanged when
    the cost is unknown, not finite or negative)."""
    s = state if state is not None else FRESH
    if cost_usd is None or isinstance(cost_usd, bool) or not isinstance(cost_usd, (int, float)) \
            or not math.isfinite(cost_usd) or cost_usd < 0.0:
        return s
    count = s.count + 1.0
    spend = s.spend_per_1k + (1000.0 * cost_usd - s.spend_per_1k) / min(count, SPEND_WINDOW)
    step = dual_step(s.multiplier, cost_usd, rule, s.carry)
    return PaceState(step.multiplier, spend, count, s.spend_usd + cost_usd, now, step.carry)


def multiplier_of(state: Optional[PaceState], rule: Optional[PaceRule]) -> float:
    """The multiplier a decision applies to the alias's cost weight: 1 without a target, the
    record's (clamped to the rule's bounds, which a reload may have narrowed) with one."""
    if rule is None:
        return 1.0
    m = state.multiplier if state is not None else FRESH.multiplier
    return clamp(m, rule.min_multiplier, rule.max_multiplier)


def rule_of(budget) -> Optional[PaceRule]:
    """The PaceRule of an alias's ``budget`` settings (policy.models.Budget); None without a target."""
    target = getattr(budget, "target_usd_per_1k_requests", None)
    if target is None:
        return None
    return PaceRule(float(target), float(budget.pacing_rate), float(budget.max_multiplier),
                    float(budget.min_multiplier))


def pace_key(alias: str, team: Optional[str]) -> str:
    """The key of the pacing record a call of `team` (None: no team) for `alias` moves."""
    return alias if not team else f"{alias}{TEAM_SEPARATOR}{team}"


def alias_of(key: str) -> str:
    """The alias of a pace key (whose rule applies to it)."""
    return key.split(TEAM_SEPARATOR, 1)[0]


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A team's (or key's) budget at a decision: its maximum and current spend (USD) and the share
    of its budget period elapsed, in [0, 1] (1 for a budget without a period)."""

    max_budget: float
    spend: float
    elapsed: float


def ahead_of_pace(status: BudgetStatus) -> float:
    """How far the spend runs ahead of "budget x elapsed share", as a share of the budget
    (negative: behind)."""
    return status.spend / status.max_budget - status.elapsed


def budget_multiplier(status: BudgetStatus, lo: float, hi: float) -> float:
    """The multiplier a budget asks for: `lo` (the alias's floor: quality first, or below 0 the
    dearer deployments) while the spend runs BUDGET_BAND or more behind the pace line, rising
    linearly to `hi` (the alias's max_multiplier: the cheapest deployments) at BUDGET_RESERVE
    behind the line and above. The integral of the spend rate against the budget's rate is the dual (sub)gradient sum
    the spend target's step makes one call at a time, here read in one piece from the budget."""
    share = (ahead_of_pace(status) + BUDGET_BAND) / (BUDGET_BAND - BUDGET_RESERVE)
    return lo + (hi - lo) * clamp(share, 0.0, 1.0)


# What governs a paced decision's multiplier (``Pacing.by``).
BY_TARGET = "target"  # the spend target's dual variable: it settles wherever the spend meets the target
BY_BUDGET = "budget"  # a LiteLLM budget's ramp (budget_multiplier), shaped for the cost bonus


class Pacing(NamedTuple):
    """A decision's multiplier and what governs it (BY_TARGET, BY_BUDGET; None: nothing paces it)."""

    multiplier: float
    by: Optional[str]


def team_multiplier(state: Optional[PaceState], rule: Optional[PaceRule], budgets, lo: float,
                    hi: float) -> Pacing:
    """The multiplier a decision of a team applies: the larger of its own spend-target record's
    (:func:`multiplier_of`, 1 without a target) and each of its `budgets`' (BudgetStatus; the
    team's, the key's); `lo`/`hi` the alias's bounds (budget.min_multiplier, max_multiplier)."""
    target = multiplier_of(state, rule)
    budget = max((budget_multiplier(b, lo, hi) for b in budgets), default=None)
    if budget is not None and (rule is None or budget >= target):
        return Pacing(budget, BY_BUDGET)
    return Pacing(target, BY_TARGET if rule is not None else None)


@dataclass(frozen=True, slots=True)
class TeamPace:
    """Who a call paces for: its team's id (None: no team; its calls move the alias's own record)
    and the budgets it spends against (BudgetStatus: the team's, the key's; empty: none known)."""

    team: Optional[str] = None
    budgets: tuple = ()


# Tiers from the cheapest (the schema's deployment annotation `tier`).
TIER_ORDER = ("free", "standard", "pro", "ultra")


def above_floor(tiers, floor: Optional[str]) -> list[int]:
    """The positions of `tiers` (each a tier or None) a paced decision keeps under the floor tier
    `floor` (``budget.floor_tier``): those at or above it and the untiered; every position when
    that would keep none, or without a floor."""
    if floor is None:
        return list(range(len(tiers)))
    lowest = TIER_ORDER.index(floor)
    keep = [k for k, t in enumerate(tiers) if t not in TIER_ORDER or TIER_ORDER.index(t) >= lowest]
    return keep or list(range(len(tiers)))
