"""Routing quality measured with its cost, the way routing papers measure it. Pure functions of
the replay's figures: no I/O.

The quality-cost plane. Every fixed candidate is a point (total cost, mean score). Sending each
request to candidate i with probability p_i (mixing, no look at the prompt) gives the point
sum p_i (cost_i, score_i): every point of the candidates' convex hull is reachable at no
routing skill at all. The *mixing frontier* is the upper side of that hull, from the cheapest
candidate (the best-scoring one among equally cheap) up to the best-scoring one (the cheapest
among equally good), made non-decreasing: at a cost above the best candidate's, mixing still
scores what the best candidate scores; below the cheapest candidate's cost nothing can be mixed,
and the frontier is taken flat at the cheapest candidate's score (a router spending less than
the cheapest model only does so by failing calls, which score 0).

* **gain over mixing** = a run's mean score minus the frontier's score at the run's cost. A router
  that learns nothing (any mixture of the candidates) gains <= 0; the per-request oracle's gain is
  the ceiling.
* For a trace of two candidates (weak = the lower mean score, strong = the other; RouteLLM,
  arXiv 2406.18665): **PGR** (performance gap recovered) of a run = (score - weak) / (strong -
  weak); the run's *strong share* is the share of its calls that went to the strong model. A
  sweep of a router's knob gives a curve of (strong share, PGR) points, closed by the two
  fixed ends, always reachable: everything to the weak model (0, 0) and everything to the
  strong one (1, 1). **CPT(x)** = the smallest strong share at which the curve (linear between
  consecutive points by share) reaches a PGR of x; random mixing needs x itself. **APGR** = the
  area under the curve over shares 0..1 (random mixing: 0.5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

from ..numbers import clamp01

EPS = 1e-12
CPT_LEVELS = (0.5, 0.8, 0.95)


@dataclass(frozen=True)
class Point:
    """One run (or fixed candidate) on the quality-cost plane."""

    cost: float
    score: float
    name: str = ""


def mixing_frontier(points: Iterable[Point]) -> list[Point]:
    """The upper, non-decreasing side of the points' convex hull, as its vertices by increasing
    cost (and score): from the cheapest point (best score among equally cheap) to the best point
    (cheapest among equally good). Empty for no points."""
    pts = sorted(points, key=lambda p: (p.cost, -p.score))
    if not pts:
        return []
    best = max(pts, key=lambda p: (p.score, -p.cost))
    # Only the points from the cheapest up to the best one can lie on a non-decreasing frontier;
    # among those, keep the Pareto set (each strictly better than every cheaper one).
    pareto: list[Point] = []
    for p in pts:
        if p.cost > best.cost + EPS:
            break
        if pareto and p.score <= pareto[-1].score + EPS:
            continue
        pareto.append(p)
    # Upper hull (monotone chain): drop a vertex lying on or under the segment of its neighbours.
    hull: list[Point] = []
    for p in pareto:
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            cross = (b.cost - a.cost) * (p.score - a.score) - (b.score - a.score) * (p.cost - a.cost)
            if cross >= -EPS:  # b is not above the line a-p
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def frontier_score(frontier: Sequence[Point], cost: float) -> float:
    """The best mean score a mixture of the candidates reaches at `cost` (see the module
    docstring for costs outside the frontier's range)."""
    if not frontier:
        raise ValueError("no fixed candidate: the mixing frontier is empty")
    if cost <= frontier[0].cost:
        return frontier[0].score
    for a, b in zip(frontier, frontier[1:]):
        if cost <= b.cost:
            span = b.cost - a.cost
            return b.score if span <= EPS else a.score + (b.score - a.score) * (cost - a.cost) / span
    return frontier[-1].score


def gain_over_mixing(score: float, cost: float, frontier: Sequence[Point]) -> float:
    """Mean score above what mixing the fixed candidates scores at the same cost."""
    return score - frontier_score(frontier, cost)


def weak_and_strong(fixed: Mapping[str, Point]) -> Optional[tuple[str, str]]:
    """(weak, strong) of a two-candidate trace: strong scores higher (the costlier on a tie);
    None unless there are exactly two candidates with different scores."""
    if len(fixed) != 2:
        return None
    (na, a), (nb, b) = fixed.items()
    if abs(a.score - b.score) <= EPS:
        return None
    return (na, nb) if (a.score, -a.cost) < (b.score, -b.cost) else (nb, na)


def pgr(score: float, weak: float, strong: float) -> float:
    """Performance gap recovered: 0 at the weak model's score, 1 at the strong one's."""
    gap = strong - weak
    if abs(gap) <= EPS:
        raise ValueError("the two models score the same: no gap to recover")
    return (score - weak) / gap


def strong_share(calls: Mapping[str, int], strong: str) -> float:
    """The share of a run's calls (every attempt) that went to `strong`."""
    total = sum(calls.values())
    return calls.get(strong, 0) / total if total else 0.0


def pgr_curve(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(strong share, PGR) points by increasing share, closed by (0, 0) and (1, 1); runs at the
    same share keep the best PGR."""
    best: dict[float, float] = {0.0: 0.0, 1.0: 1.0}
    for share, g in points:
        s = clamp01(share)
        best[s] = max(best.get(s, g), g)
    return sorted(best.items())


def cpt(curve: Sequence[tuple[float, float]], x: float) -> Optional[float]:
    """The smallest strong share at which the curve (linear between its points) reaches PGR x;
    None when it never does."""
    prev = None
    for s, g in curve:
        if g >= x - EPS:
            if prev is None or prev[1] >= x - EPS:
                return s
            ps, pg = prev
            return ps + (s - ps) * (x - pg) / (g - pg)
        prev = (s, g)
    return None


def apgr(curve: Sequence[tuple[float, float]]) -> float:
    """The area under the (share, PGR) curve over shares 0..1 (trapezoids)."""
    area = 0.0
    for (s0, g0), (s1, g1) in zip(curve, curve[1:]):
        area += (s1 - s0) * (g0 + g1) / 2.0
    return area


def cpt_text(v: Optional[float]) -> str:
    """A CPT as a share of strong-model calls; "never" for a curve that never recovers the level."""
    return "never" if v is None else f"{v:.1%}"


# -- the measures of a replay ------------------------------------------------------------------
def _point(f, name: str = "") -> Point:
    return Point(float(f.total_cost_usd), float(f.mean_score), name)


def _run_measures(f, frontier, two, fixed_pts) -> dict:
    out = {"mean_score": f.mean_score, "total_cost_usd": f.total_cost_usd,
           "mixing_score": frontier_score(frontier, f.total_cost_usd),
           "gain_over_mixing": gain_over_mixing(f.mean_score, f.total_cost_usd, frontier)}
    if two is not None:
        weak, strong = two
        out["strong_share"] = strong_share(f.calls, strong)
        out["pgr"] = pgr(f.mean_score, fixed_pts[weak].score, fixed_pts[strong].score)
    return out


def measures(baselines, runs: Sequence) -> dict:
    """Gain over mixing of each run (runner.Figures) and of the oracle, the mixing frontier, and
    for a two-candidate trace the strong shares, PGR, CPT(50/80/95) and APGR of the curve the
    runs draw (one run: its point with the two fixed ends). `baselines` is runner.Baselines.

    ``best`` is the run of the highest gain; ``oracle_share`` its gain as a share of the oracle's
    (None when the oracle gains nothing)."""
    fixed_pts = {n: _point(f, n) for n, f in baselines.fixed.items()}
    frontier = mixing_frontier(fixed_pts.values())
    two = weak_and_strong(fixed_pts)
    per_run = [{"name": getattr(f, "name", ""), **_run_measures(f, frontier, two, fixed_pts)} for f in runs]
    oracle = _run_measures(baselines.oracle, frontier, two, fixed_pts)
    out = {
        "frontier": [{"name": p.name, "total_cost_usd": p.cost, "mean_score": p.score} for p in frontier],
        "runs": per_run,
        "oracle": oracle,
        "uniform": _run_measures(baselines.uniform, frontier, two, fixed_pts),
    }
    if per_run:
        best = max(per_run, key=lambda r: r["gain_over_mixing"])
        og = oracle["gain_over_mixing"]
        out["best"] = best["name"]
        out["best_gain_over_mixing"] = best["gain_over_mixing"]
        out["oracle_share"] = best["gain_over_mixing"] / og if og > EPS else None
    if two is not None:
        curve = pgr_curve((r["strong_share"], r["pgr"]) for r in per_run)
        out["two_models"] = {
            "weak": two[0], "strong": two[1], "curve": [list(p) for p in curve],
            "cpt": {f"{round(x * 100)}": cpt(curve, x) for x in CPT_LEVELS},
            "apgr": apgr(curve),
        }
    return out


def format_measures(m: dict, *, sweep: bool = False) -> list[str]:
    """The measures as report lines."""

    def signed(v):
        return "-" if v is None else f"{v:+.4f}"

    lines = ["quality vs cost (gain over mixing = mean score - best mixture of the fixed candidates at the same cost):"]
    fr = ", ".join(f"{p['name']} (${p['total_cost_usd']:.6f}, {p['mean_score']:.4f})" for p in m["frontier"])
    lines.append(f"  mixing frontier: {fr}")
    for r in m["runs"]:
        extra = ""
        if "strong_share" in r:
            extra = f"; strong-model calls {r['strong_share']:.1%}, PGR {r['pgr']:.3f}"
        lines.append(f"  {r['name'] or 'router'}: gain over mixing {signed(r['gain_over_mixing'])} "
                     f"(score {r['mean_score']:.4f} vs mixing {r['mixing_score']:.4f} at ${r['total_cost_usd']:.6f}){extra}")
    o = m["oracle"]
    share = m.get("oracle_share")
    lines.append(f"  oracle (ceiling): gain over mixing {signed(o['gain_over_mixing'])}"
                 + (f"; {'best run' if sweep else 'router'} reaches {share:.1%} of it" if share is not None else ""))
    u = m["uniform"]
    lines.append(f"  uniform random: gain over mixing {signed(u['gain_over_mixing'])}")
    two = m.get("two_models")
    if two:
        c = two["cpt"]
        lines.append(f"  {two['weak']} (weak) vs {two['strong']} (strong): CPT(50%) {cpt_text(c['50'])}, CPT(80%) "
                     f"{cpt_text(c['80'])}, CPT(95%) {cpt_text(c['95'])}, APGR {two['apgr']:.3f} (random mixing: CPT(x) = x, APGR 0.5; "
                     f"curve: {'the swept runs' if sweep else 'the run'} with the all-weak and all-strong ends)")
    return lines


def spend_windows(costs: Sequence[float], target: float, window: int) -> Optional[dict]:
    """The windows of `window` consecutive requests starting at request `window` or later (the
    first ones are the pacing's warm-up) whose spend is highest and lowest: their start, spend
    per 1,000 requests and relative deviation from the target; None without such a window."""
    n = len(costs)
    if n < 2 * window:
        return None
    costs = [1000.0 / window * c for c in costs]  # a window's sum is then its spend per 1,000 requests
    run = sum(costs[window:2 * window])
    spends = [run]
    for i in range(window + 1, n - window + 1):
        run += costs[i + window - 1] - costs[i - 1]
        spends.append(run)
    hi = max(range(len(spends)), key=spends.__getitem__)
    lo = min(range(len(spends)), key=spends.__getitem__)
    return {side: {"start": window + k, "spend_per_1k": spends[k], "deviation": (spends[k] - target) / target}
            for side, k in (("above", hi), ("below", lo))}
