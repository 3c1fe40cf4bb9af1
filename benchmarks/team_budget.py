"""Team budgets paced to the end of their period, beside a hard cap and a 75 % / 90 % threshold switch.

    .venv/bin/python benchmarks/team_budget.py [--seed 0] [--days 7]

A simulated week of four teams' traffic through one alias of three deployments (frontier, mid,
small; their quality and price below), each team with a daily LiteLLM budget (``budget_duration:
1d``). Per request, the real Engine decides (``Engine.decide`` with the team's
``pacing.TeamPace``: its budget as ``litellm/team_budget.py`` reads it from LiteLLM, spend vs
budget x elapsed share of the day) and learns from the outcome (``Engine.record``, the answer's
grade as a judge's evidence, as the replay records it; one engine and one store for every team,
as one proxy serves them). What is simulated, as LiteLLM does it: the team's spend (counted
after each answer) and the budget refusal once spend reaches the budget (before any routing).

Compared, on the same requests and answers (and, as references with no budget at all, the best
fixed deployment and random mixing of the three):
- ``paced``: the router, the team's budget pacing its cost multiplier (docs/security.md#tenants);
- ``hard cap``: always the best deployment (frontier, known in hindsight) until LiteLLM refuses;
- ``switch 75/90``: frontier, then mid from 75 % of the budget, small from 90 %, refused at 100 %
  (what third-party budget-downgrade plugins do).

Teams (their day's spend if every request went to frontier, over their budget): ``heavy`` 3x
(would overspend by 3x), ``bursty`` 1.2x on plain days and 3.6x on its two burst days (three times
the traffic, in the morning), ``steady`` 1.3x, ``light`` 0.4x (underspends). Requests arrive over
business hours (more between 9:00 and 18:00); a request's prompt is 200-6,000 tokens (log-uniform)
and its answer 100-800. A request has a difficulty d (uniform): a deployment of quality q answers
it well (score 1) when d < q, else poorly (score 0.2): a harder request fails on every weaker one.

Per team and day: spend / budget, requests refused by the budget, and whether a refusal came while a
cheaper deployment existed (the team had sent a request that day to a dearer one than the cheapest:
the budget could have been kept by serving cheaper); mean score of every request (a refused one
scores 0) and of the served ones. Writes benchmarks/results/team_budget.{json,md}, and its table
into README.md, docs/benchmarks.md
and benchmarks/RESULTS.md (between their ``team-budget`` markers)."""

from __future__ import annotations

import math
import random
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import bench  # first: LiteLLM offline, the repository importable

from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.outcome import Outcome
from aisia_plugin.pacing import BudgetStatus, TeamPace
from aisia_plugin.policy import load_policy

ALIAS = "auto/team"
DAY_S = 86400.0
# name -> (quality, USD per 1M tokens in and out)
DEPLOYMENTS = {"frontier": (0.92, 10.0), "mid": (0.82, 2.0), "small": (0.62, 0.3)}
CHEAPEST = "small"
# team -> (requests on a plain day, frontier spend over budget, burst days)
TEAMS = {"heavy": (500, 3.0, ()), "bursty": (400, 1.2, (1, 4)), "steady": (600, 1.3, ()), "light": (300, 0.4, ())}
BURST = 3.0
POLICY = f"""
version: 1
aliases:
  {ALIAS}: {{strategy: ucb1}}
"""
MSG = [{"role": "user", "content": "answer the team's question"}]
MODES = ("paced", "hard cap", "switch 75/90")
# References without any budget (the guide's: the best fixed deployment, random mixing): what
# quality costs when nothing is refused.
REFERENCES = ("frontier, no budget", "random mixing, no budget")


@dataclass
class Request:
    team: str
    day: int
    t: float  # seconds since the start of the week
    tokens: int  # prompt and answer
    difficulty: float


def hour_weights() -> list[float]:
    return [3.0 if 9 <= h < 18 else 1.0 if 7 <= h < 21 else 0.2 for h in range(24)]


def arrivals(rng: random.Random, n: int, weights: list[float], morning: bool) -> list[float]:
    """`n` times of day (seconds), by the hourly weights (a burst: between 9:00 and 12:00)."""
    hours = list(range(9, 12)) if morning else list(range(24))
    w = [weights[h] for h in hours]
    return sorted(3600.0 * rng.choices(hours, w)[0] + rng.uniform(0, 3600.0) for _ in range(n))


def week(seed: int, days: int) -> list[Request]:
    rng, weights, out = random.Random(seed), hour_weights(), []
    for team, (n, _, bursts) in TEAMS.items():
        for day in range(days):
            times = arrivals(rng, n, weights, False)
            if day in bursts:
                times += arrivals(rng, int(n * (BURST - 1)), weights, True)
            for t in times:
                tokens = int(math.exp(rng.uniform(math.log(200), math.log(6000)))) + rng.randint(100, 800)
                out.append(Request(team, day, day * DAY_S + t, tokens, rng.random()))
    out.sort(key=lambda r: r.t)
    return out


def cost(dep: str, r: Request) -> float:
    return r.tokens * DEPLOYMENTS[dep][1] / 1e6


def score(dep: str, r: Request) -> float:
    return 1.0 if r.difficulty < DEPLOYMENTS[dep][0] else 0.2


def budgets(reqs: list[Request]) -> dict[str, float]:
    """Each team's daily budget: its mean plain day's frontier spend over its factor."""
    out = {}
    for team, (_, factor, bursts) in TEAMS.items():
        plain = [r for r in reqs if r.team == team and r.day not in bursts]
        days = len({r.day for r in plain})
        out[team] = sum(cost("frontier", r) for r in plain) / days / factor
    return out


def engine_for(seed: int) -> tuple[Engine, list[Deployment], list]:
    path = Path(tempfile.mkdtemp()) / "team_budget.yaml"
    path.write_text(textwrap.dedent(POLICY))
    now = [0.0]
    eng = Engine(load_policy([path]), clock=lambda: now[0], rng=random.Random(seed))
    pool = [Deployment(id=n, model_name=n, model=f"openai/{n}", provider=n, input_cost_per_1m=p, output_cost_per_1m=p)
            for n, (_, p) in DEPLOYMENTS.items()]
    return eng, pool, now


def threshold_choice(spent: float, budget: float) -> str:
    share = spent / budget
    return "frontier" if share < 0.75 else "mid" if share < 0.90 else "small"


def run(mode: str, reqs: list[Request], budget: dict[str, float], seed: int) -> dict:
    """Per (team, day): spend, requests, refused, refused while a dearer choice had been made, scores."""
    eng, pool, now = engine_for(seed) if mode == "paced" else (None, None, None)
    mix = random.Random(f"mix:{seed}")
    cells: dict = {}
    for r in reqs:
        c = cells.setdefault((r.team, r.day), {"spend": 0.0, "requests": 0, "refused": 0, "refused_with_cheaper": 0,
                                               "score": 0.0, "served_score": 0.0, "served": 0, "dearer": 0,
                                               "by": {n: 0 for n in DEPLOYMENTS}})
        c["requests"] += 1
        top = budget[r.team]
        if c["spend"] >= top and mode not in REFERENCES:  # LiteLLM's budget check, before any routing
            c["refused"] += 1
            c["refused_with_cheaper"] += 1 if c["dearer"] else 0
            continue
        if mode == "paced":
            now[0] = r.t
            status = BudgetStatus(top, c["spend"], (r.t - r.day * DAY_S) / DAY_S)
            d = eng.decide(ALIAS, MSG, pool, team=TeamPace(r.team, (status,)))
            dep = d.deployment_id
            eng.record(d, Outcome(dep, success=True, latency_s=1.0, quality=score(dep, r), cost_usd=cost(dep, r)),
                       team=r.team)
        elif mode == "random mixing, no budget":
            dep = mix.choice(list(DEPLOYMENTS))
        else:
            dep = "frontier" if mode in ("hard cap", "frontier, no budget") else threshold_choice(c["spend"], top)
        c["spend"] += cost(dep, r)
        s = score(dep, r)
        c["score"] += s
        c["served_score"] += s
        c["served"] += 1
        c["dearer"] += dep != CHEAPEST
        c["by"][dep] += 1
    return {f"{team}/{day}": {**c, "budget": budget[team]} for (team, day), c in sorted(cells.items())}


def summary(cells: dict) -> dict:
    out = {}
    for team in TEAMS:
        rows = [c for k, c in cells.items() if k.split("/")[0] == team]
        n = sum(c["requests"] for c in rows)
        out[team] = {
            "max_spend_share": max(c["spend"] / c["budget"] for c in rows),
            "mean_spend_share": sum(c["spend"] / c["budget"] for c in rows) / len(rows),
            "days_over_budget": sum(c["spend"] > c["budget"] for c in rows),
            "refused": sum(c["refused"] for c in rows),
            "refused_with_cheaper": sum(c["refused_with_cheaper"] for c in rows),
            "mean_score": sum(c["score"] for c in rows) / n,
            "served_score": sum(c["served_score"] for c in rows) / max(1, sum(c["served"] for c in rows)),
            "requests": n,
        }
    return out


def markdown(report: dict) -> list[str]:
    rows = []
    for team in TEAMS:
        for mode in MODES + REFERENCES:
            s = report["summary"][mode][team]
            rows.append([team, mode, f"{s['mean_spend_share']:.0%}", f"{s['max_spend_share']:.0%}", s["days_over_budget"],
                         s["refused"], s["refused_with_cheaper"], f"{s['mean_score']:.3f}"])
    return bench.md_table(["team", "mode", "spend/budget, mean day", "worst day", "days over", "refused",
                           "refused, cheaper existed", "mean score (refused = 0)"], rows)


def compact(report: dict) -> list[str]:
    """The README's table: per team, each mode's worst day, refusals and mean score."""
    rows = []
    for team in TEAMS:
        cells = []
        for mode in MODES:
            s = report["summary"][mode][team]
            cells.append(f"{s['max_spend_share']:.0%} / {s['refused']} / {s['mean_score']:.3f}")
        rows.append([f"{team} ({TEAMS[team][1]:g}x)"] + cells)
    return bench.md_table(["team (frontier spend / budget)"] + [f"{m}: worst day / refused / score" for m in MODES],
                          rows)


def daily(report: dict, team: str) -> list[str]:
    days = sorted({int(k.split("/")[1]) for k in report["cells"]["paced"] if k.startswith(team + "/")})
    head = ["mode"] + [f"day {d + 1}" for d in days]
    rows = [[mode] + [f"{report['cells'][mode][f'{team}/{d}']['spend'] / report['cells'][mode][f'{team}/{d}']['budget']:.0%}"
                      for d in days] for mode in MODES]
    return bench.md_table(head, rows)


def main(argv=None) -> dict:
    args = bench.arguments(__doc__, argv, seed=0, days=7)
    reqs = week(args.seed, args.days)
    budget = budgets(reqs)
    report = {"conditions": bench.conditions(seed=args.seed, days=args.days, requests=len(reqs)),
              "deployments": {n: {"quality": q, "usd_per_1m": p} for n, (q, p) in DEPLOYMENTS.items()},
              "teams": {t: {"requests_per_plain_day": n, "frontier_over_budget": f, "burst_days": list(b),
                            "daily_budget_usd": budget[t]} for t, (n, f, b) in TEAMS.items()},
              "cells": {}, "summary": {}}
    for mode in MODES + REFERENCES:
        bench.progress(f"{mode}: {len(reqs)} requests")
        report["cells"][mode] = run(mode, reqs, budget, args.seed)
        report["summary"][mode] = summary(report["cells"][mode])
    table = markdown(report)
    md = "\n".join([
        "# Team budgets: paced, hard cap, threshold switch", "",
        f"`benchmarks/team_budget.py`, seed {args.seed}, {args.days} days, {len(reqs)} requests of four teams "
        "through one alias (frontier q 0.92 $10/1M, mid q 0.82 $2/1M, small q 0.62 $0.3/1M); daily budgets; "
        "LiteLLM's refusal at 100 % simulated. See the script's docstring for the traffic.", "",
        *table, "",
        "Spend / budget per day, team `bursty` (bursts on days 2 and 5):", "", *daily(report, "bursty"), "",
        "Spend / budget per day, team `heavy` (3x):", "", *daily(report, "heavy"), ""])
    bench.write_results("team_budget", report, md)
    short = compact(report)
    for page in (bench.REPO / "README.md", bench.REPO / "docs" / "benchmarks.md"):
        bench.replace_blocks(page, {"team-budget": short})
    bench.replace_blocks(bench.HERE / "RESULTS.md", {"team-budget": table})
    print(md)
    print("\n".join(short))
    return report


if __name__ == "__main__":
    main()
