"""The live routing page (`GET /aisia/ui`): one self-contained HTML file shipped in the package,
and the JSON it polls, built here from plain data (no LiteLLM, no I/O), so that the proxy adapter
only has to serve them: all of it to the proxy admin, ``team_snapshot`` to a team's key."""

from __future__ import annotations

import html
from collections import Counter, defaultdict, deque
from importlib import resources
from typing import Iterable, Mapping, Optional

from ..breaker import OPEN, BreakerState, CircuitBreaker

RECENT_SHOWN = 50
TIMELINE_DECISIONS = 1000  # routed decisions kept per alias for the share-over-time chart
TIMELINE_BINS = 30
TEAM_TIMELINE_DECISIONS = 200  # per team and alias (TeamTimelines)
MAX_TEAMS = 256  # teams whose timelines are kept (the least recently routed one is dropped)


def page_html() -> str:
    return resources.files(__package__).joinpath("routing.html").read_text(encoding="utf-8")


def signin_html(message: str = "") -> str:
    """The routing page's sign-in form, with `message` (escaped) above it."""
    form = resources.files(__package__).joinpath("signin.html").read_text(encoding="utf-8")
    return form.replace("{{message}}", html.escape(message))


class TrafficTimeline:
    """Each alias's latest routed decisions, ``(time, deployment id)``, at most ``per_alias`` of
    them: the routing page's chart of each alias's traffic share over time, where a break and
    the move away from the broken deployment show."""

    def __init__(self, per_alias: int = TIMELINE_DECISIONS):
        self.per_alias = per_alias
        self._decisions: dict[str, deque] = {}

    def add(self, alias: str, deployment_id: str, at: float) -> None:
        kept = self._decisions.get(alias)
        if kept is None:
            kept = self._decisions[alias] = deque(maxlen=self.per_alias)
        kept.append((at, deployment_id))

    def bins(self, alias: str, n: int = TIMELINE_BINS) -> Optional[dict]:
        """The alias's kept decisions in `n` equal spans of time from the first to the last: per
        span its end, its number of decisions and each deployment's share of them (an empty span
        is a gap in the traffic). None without decisions."""
        kept = list(self._decisions.get(alias) or ())
        if not kept:
            return None
        start, end = kept[0][0], kept[-1][0]
        width = (end - start) / n if end > start else 1.0
        counts = [Counter() for _ in range(n)]
        for at, dep in kept:
            counts[min(int((at - start) / width), n - 1)][dep] += 1
        spans = []
        for k, c in enumerate(counts):
            total = sum(c.values())
            spans.append({"end": start + (k + 1) * width, "decisions": total,
                          "share": {dep: m / total for dep, m in c.most_common()}})
        return {"start": start, "end": end, "span_s": width, "decisions": len(kept), "bins": spans}


class TeamTimelines:
    """A TrafficTimeline per team: each team's own routed decisions, for its view of the page;
    at most ``teams`` teams, the one routed least recently dropped first."""

    def __init__(self, teams: int = MAX_TEAMS, per_alias: int = TEAM_TIMELINE_DECISIONS):
        self.teams, self.per_alias = teams, per_alias
        self._timelines: dict[str, TrafficTimeline] = {}

    def add(self, team: str, alias: str, deployment_id: str, at: float) -> None:
        timeline = self._timelines.pop(team, None)
        if timeline is None:
            timeline = TrafficTimeline(self.per_alias)
            if len(self._timelines) >= self.teams:
                self._timelines.pop(next(iter(self._timelines)))
        self._timelines[team] = timeline  # (last: the most recently routed)
        timeline.add(alias, deployment_id, at)

    def of(self, team: str) -> Optional[TrafficTimeline]:
        return self._timelines.get(team)


def quality_row(quality: Optional[Mapping]) -> Optional[dict]:
    """A stats row's quality as the page shows it beside health: the estimate, the declared prior
    and the evidence by source (signals, judge, feedback); None when the store says nothing."""
    if not quality:
        return None
    evidence = quality.get("evidence") or {}
    return {"estimate": quality.get("estimate"), "prior": quality.get("prior"),
            "evidence": {k: evidence.get(k, 0.0) for k in ("signal", "judge", "feedback")}}


def snapshot(*, now: float, aliases: Mapping[str, object], deployments: Iterable[object], stats: Mapping[str, dict],
             breakers: Mapping[str, BreakerState], breaker: CircuitBreaker, recent: Iterable[Mapping],
             store: str = "memory", timeline: Optional[TrafficTimeline] = None, teams: Optional[Mapping] = None) -> dict:
    """What the page shows: per alias its strategy and the share of its recent decisions per
    deployment; per deployment its price, breaker (with the seconds until an OPEN one half-opens),
    learned statistics (global and per domain) and, beside that health, its quality estimate with
    the prior and the evidence by source; the last decisions with their reasons.

    ``aliases``: name -> the policy's Alias; ``deployments``: the proxy's Deployments;
    ``stats``: a store's ``stats()``; ``recent``: the explain entries, oldest first, each with at
    least ``alias`` and ``deployment``; ``timeline``: each alias's share over time (``timeline``
    of each alias row, None without traffic); ``teams``: every team's figures
    (metrics.team_figures)."""
    recent = list(recent)
    alias_rows = _alias_rows(aliases, recent, timeline)
    dep_rows = []
    for d in deployments:
        bs = breakers.get(d.id) or BreakerState()
        state = breaker.effective_state(bs, now)
        to_half_open: Optional[float] = None
        if state == OPEN:
            to_half_open = max(0.0, bs.last_failure_time + breaker.timeout_s - now)
        s = stats.get(d.id) or {}
        dep_rows.append({
            "id": d.id, "model_name": d.model_name, "model": d.model, "local": d.local,
            "cost_per_1m": d.cost_per_1m, "breaker": state, "to_half_open_s": to_half_open,
            "rate_limited": now < bs.rate_limited_until,
            "count": s.get("count", 0), "pulls": s.get("pulls", 0.0), "mean_reward": s.get("mean_reward", 0.0),
            "avg_latency_s": s.get("avg_latency"), "error_rate": s.get("error_rate", 0.0),
            "quality": quality_row(s.get("quality")),
            "domains": {dom: {"count": r.get("count", 0), "mean_reward": r.get("mean_reward", 0.0)}
                        for dom, r in sorted((s.get("domains") or {}).items())},
        })
    return {"now": now, "store": store, "view": {"role": "admin"}, "aliases": alias_rows, "deployments": dep_rows,
            "teams": dict(teams or {}), "recent": recent[-RECENT_SHOWN:][::-1]}


def _alias_rows(aliases: Mapping[str, object], recent: list, timeline: Optional[TrafficTimeline]) -> dict:
    """Per alias its strategy, description and the share of the `recent` decisions per deployment."""
    shares: dict = defaultdict(Counter)
    for entry in recent:
        if entry.get("deployment"):
            shares[entry.get("alias")][entry["deployment"]] += 1
    rows = {}
    for name, a in aliases.items():
        counts = shares.get(name, Counter())
        total = sum(counts.values())
        rows[name] = {
            "strategy": getattr(a, "strategy", None), "description": getattr(a, "description", ""),
            "decisions": total,
            "share": {dep: n / total for dep, n in counts.most_common()} if total else {},
            "timeline": timeline.bins(name) if timeline is not None else None,
        }
    return rows


# What a team's key sees of a decision: no reason (its scores are what was learned per deployment).
TEAM_RECENT_FIELDS = ("ts", "request_id", "alias", "deployment", "domain", "strategy", "layer")


def team_snapshot(*, now: float, team: str, layer: Optional[Mapping], aliases: Mapping[str, object],
                  figures: Mapping, recent: Iterable[Mapping], timeline: Optional[TrafficTimeline],
                  store: str = "memory") -> dict:
    """What a team's key sees (docs/teams.md): per alias, as its layer defines it, the share of
    its team's recent decisions per deployment and their timeline; its team's decisions and
    outcomes per alias and deployment (``figures``: metrics.team_figures of that team); its
    team's latest decisions without their reasons; the layer that decides its requests (``layer``
    as written, None: the operator's policy). Nothing per deployment beyond that: no breaker, no
    learned statistics, no quality, no price.

    ``recent``: the explain entries of this team's calls only, oldest first."""
    recent = list(recent)
    return {"now": now, "store": store, "view": {"role": "team", "team": team, "layer": layer},
            "aliases": _alias_rows(aliases, recent, timeline), "deployments": [],
            "teams": {team: figures.get(team, {})},
            "recent": [{k: e.get(k) for k in TEAM_RECENT_FIELDS} for e in recent[-RECENT_SHOWN:][::-1]]}
