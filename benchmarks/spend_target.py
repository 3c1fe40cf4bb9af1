"""The spend target (budget.target_usd_per_1k_requests) on the replay traces, beside the cost_weight sweep.

    .venv/bin/python benchmarks/spend_target.py [--out benchmarks/out] [--strategy ucb1 --strategy contextual]
                                                [--traces stationary,routellm_gsm8k_x4] [--seed 0] [--floors 0,-10]

Per trace and strategy (alias ``auto`` of the shipped policy, its strategy replaced), the router
is replayed online (``aisia_plugin.replay.runner.sweep``, the real Engine, as ``aisia replay
--sweep`` does) once per spend target and once per cost weight. Targets: 20 %, 40 %, 60 % and 80 %
of the way from the spend of the cheapest fixed candidate to the router's spend at cost_weight 0
(USD per 1,000 requests: what a multiplier of 0 spends, the most a target can bind). The target
sweep runs once per floor (budget.min_multiplier): 0, the default (a cap), and -10 (the target
tracked from below too). The figures
per target (``runner.spend_figures``) are defined at the top of the Markdown it writes; the cost
weight sweep's curve is read linearly between its two runs around a spend ("-" outside its range).

Traces: the synthetic scenarios (``aisia_plugin.replay.scenarios``, 3,000 requests, generated
into --out; in price_change the router reads the new list price during the event, as run_all.py
replays it) and RouteLLM GSM8K (benchmarks/convert_data.py; 1,319 prompts, too few for a window
after the first 1,000, so ``routellm_gsm8k_x4`` is the trace four times over, each pass shuffled
with its own seed: 5,276 requests). Writes benchmarks/results/spend_target.{json,md}."""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from pathlib import Path

import bench  # first: LiteLLM offline, the repository importable
import convert_data

from aisia_plugin.policy import load_policy
from aisia_plugin.replay import scenarios
from aisia_plugin.replay.candidates import load_candidates
from aisia_plugin.replay.quality import format_measures
from aisia_plugin.replay.report import sweep_measures
from aisia_plugin.replay.runner import TARGET, build_scenario, override_alias, sweep, with_strategy
from aisia_plugin.replay.trace import load_trace

ALIAS = "auto"
SHARES = (0.2, 0.4, 0.6, 0.8)
COST_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
SYNTHETIC = scenarios.SCENARIOS + scenarios.PROMPT_SCENARIOS
GSM8K_PASSES = 4


def write_traces(out: Path) -> None:
    """Every trace, written afresh into `out` (seeded: the same files every time; the shorter traces
    `run_all.py --quick` leaves there have no window after the first 1,000 requests)."""
    for name in SYNTHETIC:
        scenarios.write_scenario(out, name, *scenarios.generate_scenario(name))
    convert_data.convert_all(out)
    lines, rows = (out / "routellm_gsm8k.jsonl").read_text(encoding="utf-8").splitlines(), []
    for k in range(GSM8K_PASSES):
        order = list(lines)
        random.Random(f"spend-target-gsm8k:{k}").shuffle(order)
        rows += [json.dumps({**(rec := json.loads(line)), "id": f"{rec['id']}#{k}"}, ensure_ascii=False) for line in order]
    looped = out / f"routellm_gsm8k_x{GSM8K_PASSES}"
    looped.with_suffix(".jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    shutil.copyfile(out / "routellm_gsm8k.candidates.yaml", looped.with_suffix(".candidates.yaml"))


def curve_score(points, spend: float):
    """The score of the cost_weight curve (points (spend, score) sorted by spend) at `spend`."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= spend <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (spend - x0) / (x1 - x0)
    return None


def measure(name: str, out: Path, strategy: str, seed: int, floors=(0.0,)) -> dict:
    policy = load_policy()
    trace = load_trace(str(out / f"{name}.jsonl"))
    specs = load_candidates(str(out / f"{name}.candidates.yaml"), trace_names=trace.candidates, policy=policy)
    scenario, n = build_scenario(trace, specs, policy, seed=seed), len(trace)
    meta = out / f"{name}.meta.json"
    repriced = scenarios.price_event(json.loads(meta.read_text(encoding="utf-8")).get("event") if meta.exists() else None)
    pol = with_strategy(policy, ALIAS, strategy)
    weight_sweep = sweep(pol, ALIAS, scenario, "cost_weight", COST_WEIGHTS, seed=seed, deployments_at=repriced)
    weights = weight_sweep.points
    fixed_spend = {c: 1000.0 * f.total_cost_usd / n for c, f in weight_sweep.baselines.fixed.items()}
    cheapest = min(fixed_spend.values())
    curve = sorted((1000.0 * p.figures.total_cost_usd / n, p.figures.mean_score) for p in weights)
    free = 1000.0 * weights[0].figures.total_cost_usd / n  # cost_weight 0: what a multiplier of 0 spends
    targets = [round(cheapest + s * (free - cheapest), 6) for s in SHARES]
    rows, target_sweeps = [], []
    for floor in floors:  # budget.min_multiplier: 0, the target as a cap; below, tracked from below too
        floored = override_alias(pol, ALIAS, "budget.min_multiplier", floor)
        target_sweeps.append(target_sweep := sweep(floored, ALIAS, scenario, TARGET, targets, seed=seed,
                                                   deployments_at=repriced))
        for p in target_sweep.points:
            f, at = p.figures, curve_score(curve, p.spend["spend_per_1k"])
            rows.append({"target_usd_per_1k": p.value, **p.spend, "mean_score": f.mean_score,
                         "cost_weight_curve_score": at, "vs_cost_weight": None if at is None else f.mean_score - at,
                         "calls": f.calls})
    return {"trace": name, "strategy": strategy, "requests": n, "fixed_spend_per_1k": fixed_spend,
            "spend_at_cost_weight_0": free, "rows": rows,
            "cost_weight_curve": [{"cost_weight": p.value, "spend_per_1k": 1000.0 * p.figures.total_cost_usd / n,
                                   "mean_score": p.figures.mean_score} for p in weights],
            "target_measures": {f"{f:g}": sweep_measures(t) for f, t in zip(floors, target_sweeps)},
            "cost_weight_measures": sweep_measures(weight_sweep)}


def markdown(results: list[dict], meta: dict) -> str:
    out = ["# Spend target: realised spend, quality, and the cost_weight sweep at the same spend", "",
           f"`benchmarks/spend_target.py`, {meta['date']}, seed {meta['seed']}, alias `auto` of the shipped policy "
           f"(its strategy replaced), budget.pacing_rate and budget.max_multiplier at their defaults, budget.min_multiplier "
           f"(floor) 0, the default (the target as a cap), then each floor below 0 asked for. Spend in USD "
           f"per 1,000 requests; highest / lowest window: the 1,000 consecutive requests, starting at request 1,000 "
           f"or later, that spent most / least (deviation from the target; at floor: the share of that window's requests "
           f"after which the multiplier sat at its floor, at 0 where the target did not bind); at floor / at max: the "
           f"share of the requests after the first 1,000 after which the multiplier sat at its floor / at "
           f"budget.max_multiplier (the target is below what the cost term can buy). `vs cost_weight`: the mean "
           f"score minus the score of the cost_weight sweep's curve ({', '.join(f'{w:g}' for w in COST_WEIGHTS)}) "
           f"at the same spend.", ""]
    for r in results:
        out += [f"## {r['trace']} ({r['requests']} requests), {r['strategy']}", "",
                f"Spend per 1k at cost_weight 0 (a multiplier of 0): {r['spend_at_cost_weight_0']:.4f}; cheapest fixed "
                f"candidate: {min(r['fixed_spend_per_1k'].values()):.4f}.", ""]
        cells = []
        for row in r["rows"]:
            w = row["windows"]
            cw = row["cost_weight_curve_score"]
            cells.append([f"{row['floor']:g}", f"{row['target_usd_per_1k']:.4f}", f"{row['spend_per_1k']:.4f} ({row['whole_deviation']:+.1%})",
                          *((f"{w[side]['spend_per_1k']:.4f} ({w[side]['deviation']:+.1%}; at floor {w[side]['at_floor']:.0%})"
                             for side in ("above", "below"))
                            if w else ("-", "-")),
                          f"{row['at_floor']:.0%} / {row['at_max']:.0%}", f"{row['mean_score']:.4f}",
                          "-" if cw is None else f"{cw:.4f}",
                          "-" if row["vs_cost_weight"] is None else f"{row['vs_cost_weight']:+.4f}"])
        out += bench.md_table(["floor", "target", "spend, whole run", "highest window", "lowest window", "at floor / at max",
                               "mean score", "cost_weight curve at that spend", "vs cost_weight"], cells, "---:")
        curve = ", ".join(f"{c['cost_weight']:g}: ${c['spend_per_1k']:.4f} / {c['mean_score']:.4f}"
                          for c in r["cost_weight_curve"])
        out += ["", f"cost_weight sweep (weight: spend per 1k / mean score): {curve}", ""]
        for title, measures in (*((f"Target sweep, floor {f}", m) for f, m in r["target_measures"].items()),
                                ("cost_weight sweep", r["cost_weight_measures"])):
            out += [f"{title}:", "```", *format_measures(measures, sweep=True), "```", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, out=(str(bench.OUT), "where the traces are written"),
                           strategy=([], "default: ucb1 and contextual"),
                           traces=",".join(SYNTHETIC + (f"routellm_gsm8k_x{GSM8K_PASSES}",)), seed=0,
                           floors=("0,-10", "budget.min_multiplier values, each a sweep of the targets"))
    out = Path(args.out)
    write_traces(out)
    results = []
    for name in args.traces.split(","):
        for strategy in args.strategy or ["ucb1", "contextual"]:
            t0 = time.time()
            results.append(r := measure(name, out, strategy, args.seed, [float(f) for f in args.floors.split(",")]))
            worst = max((abs(row["windows"][side]["deviation"]) for row in r["rows"] if row["windows"]
                         for side in ("above", "below")), default=None)
            print(f"{name} {strategy}: worst window deviation {worst:.1%} ({time.time() - t0:.0f} s)", flush=True)
    meta = {"date": time.strftime("%Y-%m-%d"), "seed": args.seed}
    bench.write_results("spend_target", {"meta": meta, "results": results}, markdown(results, meta) + "\n", indent=1)
    print(f"wrote {bench.RESULTS / 'spend_target.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
