"""A request's team and budgets, read from LiteLLM's ``UserAPIKeyAuth`` (1.108.7), for pacing.

What the pacing needs (aisia_plugin/pacing.py, docs/security.md#tenants): the team whose record the
call moves, and each budget it spends against as ``pacing.BudgetStatus`` (maximum, spend, elapsed
share of the period). Where LiteLLM keeps them on the auth object of a request:

- team: ``team_id``; ``team_max_budget``, ``team_spend``; the period's reset time on
  ``team_budget_snapshot.budget_reset_at`` (set by LiteLLM's auth when it loaded the team row).
  LiteLLM carries no team ``budget_duration`` on the auth object: it is read from
  ``team_metadata["budget_duration"]`` (and a reset time there, when the snapshot is absent, as a
  ``custom_auth`` may give it); a team budget with no known period is paced as if the period
  ended now (elapsed share 1: the cost starts to count at 90 % of the budget).
- key: ``max_budget``, ``spend``, ``budget_duration``, ``budget_reset_at``.

Past 100 % LiteLLM's own budget check refuses the request before any routing: nothing here
changes it. A value that is not a positive finite budget is no budget (never an error: the
pacing then simply does not apply). Named functions, so that the tenancy record of a request
(team id, alias, key hash, its policy) can be joined with them."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Optional

from ..pacing import BudgetStatus, TeamPace


def team_id_of(auth) -> Optional[str]:
    """The LiteLLM team id of the request's key (None: a key of no team)."""
    team = getattr(auth, "team_id", None)
    return team if isinstance(team, str) and team else None


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _time(value: Any) -> Optional[float]:
    """A reset time as epoch seconds: a datetime (naive: UTC, as LiteLLM stores it) or its ISO text."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()


def period_seconds(duration: Any) -> Optional[float]:
    """LiteLLM's budget_duration ("30s", "1h", "7d", "1mo") in seconds, by LiteLLM's own parser."""
    if not isinstance(duration, str) or not duration:
        return None
    from litellm.litellm_core_utils.duration_parser import duration_in_seconds
    try:
        seconds = float(duration_in_seconds(duration))
    except (ValueError, TypeError):
        return None
    return seconds if seconds > 0 else None


def elapsed_share(reset_at: Any, duration: Any, now: float) -> float:
    """The share of the budget period elapsed at `now` (epoch seconds): the period ends at its
    reset time and lasts its duration; 1 when either is unknown."""
    end, length = _time(reset_at), period_seconds(duration)
    if end is None or length is None:
        return 1.0
    return min(1.0, max(0.0, 1.0 - (end - now) / length))


def budget_status(max_budget: Any, spend: Any, reset_at: Any, duration: Any, now: float) -> Optional[BudgetStatus]:
    """A BudgetStatus from LiteLLM's fields (None: no positive finite maximum)."""
    top = _number(max_budget)
    if top is None or top <= 0:
        return None
    spent = _number(spend)
    return BudgetStatus(top, max(0.0, spent or 0.0), elapsed_share(reset_at, duration, now))


def team_budget_of(auth, now: float) -> Optional[BudgetStatus]:
    """The team's budget as it stands at `now` (None: no team budget)."""
    top = getattr(auth, "team_max_budget", None)
    if top is None:  # (most teams: no budget; its period is not read)
        return None
    meta = getattr(auth, "team_metadata", None) or {}
    snapshot = getattr(auth, "team_budget_snapshot", None)
    reset = getattr(snapshot, "budget_reset_at", None) if snapshot is not None else None
    return budget_status(top, getattr(auth, "team_spend", None),
                         reset if reset is not None else meta.get("budget_reset_at"), meta.get("budget_duration"), now)


def key_budget_of(auth, now: float) -> Optional[BudgetStatus]:
    """The key's own budget as it stands at `now` (None: no key budget)."""
    top = getattr(auth, "max_budget", None)
    if top is None:  # (most keys: no budget; its period is not read)
        return None
    return budget_status(top, getattr(auth, "spend", None), getattr(auth, "budget_reset_at", None),
                         getattr(auth, "budget_duration", None), now)


def team_pace_of(auth, now: float) -> Optional[TeamPace]:
    """Whose spend a request paces (its team's record, its team's and key's budgets); None for a
    request of no team and no budget (the alias's own record)."""
    if auth is None:
        return None
    budgets = tuple(filter(None, (team_budget_of(auth, now), key_budget_of(auth, now))))  # (those that are not None)
    team = team_id_of(auth)
    return TeamPace(team, budgets) if (team or budgets) else None
