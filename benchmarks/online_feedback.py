"""What the contextual strategy loses online to the bandit's partial feedback, per trace.

    .venv/bin/python benchmarks/online_feedback.py [--trace routellm_gsm8k --trace ...] [--seeds 5]

Per trace (the cost_weight-swept ones of run_all.py by default: routellm_gsm8k, routerarena,
prompt_aware), the shipped ``auto`` alias with ``strategy: contextual`` is replayed online over
run_all.SWEEP's cost weights with router seeds 0 to --seeds - 1, twice: as a router learns (only
the chosen candidate's outcome is revealed: run_all's figure) and with full feedback
(``runner.run_router(full_feedback=True)``: the model also learns every other candidate's outcome
of each request; the same model, order, exploration and decisions' rule). Printed: the best
gain over mixing of the sweep per seed, its mean and spread, and on two-model traces CPT(95 %)
(a curve that never recovers 95 % counts as 100 %). The gap between the two rows is the most any
change that lets one outcome teach every deployment (a shared component, a difference model)
can recover online; the gap between the full-feedback row and the held-out diagnosis of
RESULTS.md (`aisia train --holdout 0.5`, greedy) is the learning curve's (the trace's first
requests are decided by a model that has seen few)."""

from __future__ import annotations

import sys

import bench  # first: LiteLLM offline, the repository importable
import convert_data
import run_all

from aisia_plugin.policy import load_policy
from aisia_plugin.replay import scenarios
from aisia_plugin.replay.candidates import price_specs
from aisia_plugin.replay.quality import measures
from aisia_plugin.replay.runner import baselines, build_scenario, figures, override_alias, run_router, with_strategy
from aisia_plugin.replay.trace import load_trace


def scenario_of(name: str, policy):
    if name in scenarios.SCENARIOS + scenarios.PROMPT_SCENARIOS:
        records, meta = scenarios.generate_scenario(name, n=scenarios.DEFAULT_REQUESTS,
                                                    n_providers=scenarios.DEFAULT_PROVIDERS, seed=scenarios.DEFAULT_SEED)
        path, cands = scenarios.write_scenario(bench.OUT, name, records, meta), scenarios.candidates_of(meta)
    else:
        path, cands = convert_data.convert_all(bench.OUT)[name]
    return build_scenario(load_trace(str(path)), price_specs(cands), policy, seed=0)


def sweep_best(policy, scenario, seed: int, full_feedback: bool) -> dict:
    """The contextual sweep's measures (best gain over mixing, CPT) for one router seed."""
    base = baselines(policy, "auto", scenario, seed=seed)
    runs = [figures(f"cost_weight={v:g}", run_router(override_alias(policy, "auto", "cost_weight", v), "auto", scenario,
                                                    seed=seed, full_feedback=full_feedback), base.oracle_served)
            for v in run_all.SWEEP]
    return measures(base, runs)


def row(label: str, per_seed: list[dict]) -> str:
    best = [m["best_gain_over_mixing"] for m in per_seed]
    cells = [label, f"{sum(best) / len(best):+.4f} ({min(best):+.4f}..{max(best):+.4f})",
             " ".join(f"{b:+.4f}" for b in best)]
    if "two_models" in per_seed[0]:
        cpt = [m["two_models"]["cpt"]["95"] for m in per_seed]
        cells.append(f"{100 * sum(1.0 if c is None else c for c in cpt) / len(cpt):.1f}%")
    else:  # more than two candidates: no strong-weak curve
        cells.append("-")
    return "| " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, trace=(list(run_all.SWEPT), "a trace's name (repeatable)"),
                           seeds=(5, "router seeds 0 to SEEDS - 1"))
    policy = with_strategy(load_policy(None), "auto", "contextual")
    for name in args.trace:
        scenario = scenario_of(name, policy)
        print(f"\n{name} ({len(scenario)} requests), contextual cost_weight sweep {', '.join(map(str, run_all.SWEEP))}\n")
        print("| feedback | best gain over mixing, mean (min..max) | per seed | CPT(95%) mean |")
        print("|---|---|---|---|")
        for label, full in (("bandit (a router)", False), ("full (diagnosis)", True)):
            print(row(label, [sweep_best(policy, scenario, s, full) for s in range(args.seeds)]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
