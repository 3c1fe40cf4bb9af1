"""The live routing page (`GET /aisia/ui`): one self-contained HTML file shipped in the package,
and the JSON it polls, built here from plain data (no LiteLLM, no I/O), so that the proxy adapter
only has to serve them behind the master key."""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from importlib import resources
from typing import Iterable, Mapping, Optional

from ..breaker import OPEN, BreakerState, CircuitBreaker

RECENT_SHOWN = 50


def page_html() -> str:
    return resources.files(__package__).joinpath("routing.html").read_text(encoding="utf-8")


def signin_html(message: str = "") -> str:
    """The routing page's sign-in form, with `message` (escaped) above it."""
    form = resources.files(__package__).joinpath("signin.html").read_text(encoding="utf-8")
    return form.replace("{{message}}", html.escape(message))


def snapshot(*, now: float, aliases: Mapping[str, object], deployments: Iterable[object], stats: Mapping[str, dict],
             breakers: Mapping[str, BreakerState], breaker: CircuitBreaker, recent: Iterable[Mapping],
             store: str = "memory") -> dict:
    """What the page shows: per alias its strategy and the share of its recent decisions per
    deployment; per deployment its price, breaker (with the seconds until an OPEN one half-opens)
    and learned statistics (global and per domain); the last decisions with their reasons.

    ``aliases``: name -> the policy's Alias; ``deployments``: the proxy's Deployments;
    ``stats``: a store's ``stats()``; ``recent``: the explain entries, oldest first, each with at
    least ``alias`` and ``deployment``."""
    recent = list(recent)
    shares: dict = defaultdict(Counter)
    for entry in recent:
        if entry.get("deployment"):
            shares[entry.get("alias")][entry["deployment"]] += 1
    alias_rows = {}
    for name, a in aliases.items():
        counts = shares.get(name, Counter())
        total = sum(counts.values())
        alias_rows[name] = {
            "strategy": getattr(a, "strategy", None), "description": getattr(a, "description", ""),
            "decisions": total,
            "share": {dep: n / total for dep, n in counts.most_common()} if total else {},
        }
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
            "domains": {dom: {"count": r.get("count", 0), "mean_reward": r.get("mean_reward", 0.0)}
                        for dom, r in sorted((s.get("domains") or {}).items())},
        })
    return {"now": now, "store": store, "aliases": alias_rows, "deployments": dep_rows,
            "recent": recent[-RECENT_SHOWN:][::-1]}
