"""Regenerate benchmarks/RESULTS.md, benchmarks/results/*.json and the results blocks of docs/benchmarks.md.

    .venv/bin/python benchmarks/run_all.py [--quick] [--seed 0] [--only NAME] [--render-only]

What it replays, through which routers, and the measures: benchmarks/README.md."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import bench
import convert_data
import decision_overhead
from bench import OUT, REPO
from litellm_baselines import STRATEGIES as LITELLM_STRATEGIES, LiteLLMBaseline, NoDeploymentAvailable

from aisia_plugin.decision import AliasSettings
from aisia_plugin.policy import load_policy
from aisia_plugin.replay import scenarios, training
from aisia_plugin.replay.candidates import price_specs
from aisia_plugin.replay.quality import cpt_text, measures
from aisia_plugin.replay.report import jsonable, sweep_measures
from aisia_plugin.replay.runner import (FIRST_REQUESTS, Call, Served, baselines, build_scenario, figures, first_choices,
                                        first_requests, run_fixed, run_label_hindsight, run_router, run_uniform,
                                        served_from, sweep, with_strategy)
from aisia_plugin.replay.trace import load_trace

RESULTS_DIR = bench.RESULTS
RESULTS_MD = bench.HERE / "RESULTS.md"
SUMMARY = REPO / "docs" / "benchmarks.md"  # the summary the README links to; its results blocks are this run's
# The cost_weight values swept (gain over mixing at the best point, CPT, APGR), on the traces of
# SWEPT, for `auto` as shipped and `auto` with the contextual strategy. Up to 3: on prompt_aware
# the cheap candidates only win the easy prompts from the best one beyond cost_weight 1 (their
# price gap is under 1 $/1M against cost_scale_per_1m 10), so a sweep stopping at 1 ends before
# the curve reaches the cheap end (the `diagnosis` of its results: `diagnose` below).
SWEEP = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0)
SWEPT = ("routellm_gsm8k", "routerarena", "prompt_aware")
# The sweeps are replayed with this many more router seeds (seed + 1...): the best point's spread.
EXTRA_SEEDS = 4
CONTEXTUAL = "aisia auto (contextual)"
HINDSIGHT = "best per domain (hindsight)"


def cost_weight_sweep(policy, scenario, seed: int, full_feedback: bool = False) -> dict:
    """`auto` replayed at every SWEEP cost_weight (``runner.sweep``): the quality measures of the curve."""
    return sweep_measures(sweep(policy, "auto", scenario, "cost_weight", SWEEP, seed=seed, full_feedback=full_feedback))


# -- routers ---------------------------------------------------------------------------------------
def run_litellm(strategy: str, scenario, names: list[str], cands: dict, failover: int, *, seed: int = 0,
                event=None) -> tuple[list[Served], dict]:
    """A LiteLLM strategy over the trace (``cands``: name -> prices), with up to ``failover`` more
    attempts (our alias's failover): re-asked after recording the failure; if it repeats a tried
    candidate, a seeded random untried one."""
    rng = random.Random(f"litellm-failover:{seed}:{strategy}")
    stats = {"random_failover_picks": 0, "no_deployment": 0}
    out: list[Served] = []
    with LiteLLMBaseline(strategy, [{"id": n, **cands[n]} for n in names], seed=seed) as bl:
        for i, (rec, row) in enumerate(zip(scenario.trace.records, scenario.calls)):
            now = i * scenario.seconds_per_request
            if event is not None and i == event["start"]:  # a config reload in a live proxy
                c = cands[event["candidate"]]
                bl.set_price(event["candidate"], c["input_cost_per_1m"] * event["factor"],
                             c["output_cost_per_1m"] * event["factor"])
            tried: list[str] = []
            attempts: list[Call] = []
            for _ in range(1 + failover):
                try:
                    cid = bl.choose(rec.messages, now)
                except NoDeploymentAvailable:
                    stats["no_deployment"] += 1
                    cid = None
                avail = [n for n in names if n in row and n not in tried]
                if not avail:
                    break
                if cid is None or cid in tried or cid not in row:
                    cid = rng.choice(avail)
                    stats["random_failover_picks"] += 1
                call = row[cid]
                bl.record(cid, now=now, latency_s=(call.latency_ms or 0.0) / 1000.0, success=call.success,
                          input_tokens=call.input_tokens or 0, output_tokens=call.output_tokens or 0,
                          cost_usd=call.cost_usd, status_code=None if call.success else (call.status_code or 500))
                tried.append(cid)
                attempts.append(call)
                if call.success:
                    break
            out.append(served_from(attempts) if attempts else Served(0.0, 0.0, None, True, None, [], 429))
    return out, stats


# -- one trace -------------------------------------------------------------------------------------
def bench_trace(name: str, path: Path, scenario, cands: dict, policy, aliases: list[str], *, seed: int, event=None,
                kind: str = "synthetic") -> dict:
    t0 = time.monotonic()
    n = len(scenario)
    base = baselines(policy, "auto", scenario, seed=seed)
    names, oracle_served, om = base.candidates, base.oracle_served, base.oracle.mean_score
    price_event = event if event and event.get("kind") == "price" else None
    attempts = policy.aliases["auto"].failover.attempts  # every router's failover, LiteLLM's and uniform's too
    rows: dict[str, dict] = {}
    runs: dict[str, object] = {}  # row name -> Figures, for the quality measures
    served_by: dict[str, list[Served]] = {}
    contextual = with_strategy(policy, "auto", "contextual")
    seeds = [seed + k for k in range(1 + EXTRA_SEEDS)]
    ours = (("aisia auto", policy), (CONTEXTUAL, contextual))

    def route(pol, alias, s):
        return run_router(pol, alias, scenario, seed=s, deployments_at=scenarios.price_event(price_event))

    def add(label, name, served, extra=None, f=None):  # f: the Figures when already known
        """A row of the trace's table: the Figures of ``served``, its error and oracle shares, its move."""
        served_by[label] = served
        f = runs[label] = f or figures(name, served, oracle_served)
        rows[label] = {**f.as_dict(), "errors_pct": 100.0 * f.errors / n if n else 0.0,
                       "pct_of_oracle": 100.0 * f.mean_score / om if om else None,
                       "move": scenarios.event_response(first_choices(served), event), **(extra or {})}

    for label, pol, alias in [(f"aisia {a}", policy, a) for a in aliases] + [(CONTEXTUAL, contextual, "auto")]:
        add(label, alias, route(pol, alias, seed), {"strategy": pol.aliases[alias].strategy})
    for strat in LITELLM_STRATEGIES:
        served, notes = run_litellm(strat, scenario, names, cands, attempts, seed=seed, event=price_event)
        add(f"litellm {strat}", strat, served, {"failover_notes": notes})
    # best fixed candidate (by mean score, cheapest on ties), uniform random, oracle
    best = max(base.fixed.items(), key=lambda kv: (kv[1].mean_score, -kv[1].total_cost_usd))[0]
    uni = run_uniform(scenario, names, attempts=attempts, seed=seed)
    for label, served, f in ((f"best fixed ({best})", run_fixed(scenario, best)[0], base.fixed[best]),
                             ("uniform random", uni, base.uniform), ("oracle", oracle_served, base.oracle)):
        add(label, None, served, f=f)
    by_label = run_label_hindsight(scenario, names)  # what knowing each domain's best is worth
    if by_label is not None:
        add(HINDSIGHT, HINDSIGHT, by_label)
    # Quality with its cost: each row's gain over mixing the fixed candidates at its cost.
    q = measures(base, list(runs.values()))
    for label, m in zip(runs, q["runs"]):
        rows[label].update({k: m[k] for k in ("gain_over_mixing", "mixing_score", "strong_share", "pgr") if k in m})
    if name in scenarios.SCENARIOS:  # issue 20's targets hold for the mean over router seeds
        for label, pol in ours:
            figs = [runs[label]] + [figures(label, route(pol, "auto", s), oracle_served) for s in seeds[1:]]
            rows[label]["by_seed"] = {"seeds": seeds, "gain_over_mixing": [m["gain_over_mixing"] for m in measures(
                base, figs)["runs"]], **{k: [getattr(f, k) for f in figs] for k in ("mean_score", "total_cost_usd")}}
    sweeps = {}
    if name in SWEPT:
        for label, pol in ours:
            per_seed = [cost_weight_sweep(pol, scenario, s) for s in seeds]
            # The same sweep with other router seeds (Thompson draws, exploration): how much of a
            # best point is the seed's.
            sweeps[label] = dict(per_seed[0], best_gain_by_seed={
                "seeds": seeds, "best": [m["best_gain_over_mixing"] for m in per_seed],
                **({"cpt95": [m["two_models"]["cpt"]["95"] for m in per_seed]} if "two_models" in per_seed[0] else {})})
        # A diagnosis, not a router: the same contextual sweeps with every candidate taught its outcome of
        # each request (runner.run_router's full_feedback): the most that letting one outcome teach every
        # deployment could recover online; what stays below the held-out fit is the learning curve's.
        sweeps[CONTEXTUAL]["best_gain_by_seed"]["full_feedback"] = [cost_weight_sweep(
            contextual, scenario, s, full_feedback=True)["best_gain_over_mixing"] for s in seeds]
    return {"name": name, "kind": kind, "trace": str(path.relative_to(REPO)), "requests": n, "seed": seed,
            "candidates": names, "event": event, "best_fixed": best, "rows": rows,
            "fixed_all": {k: v.as_dict() for k, v in base.fixed.items()},
            "frontier": q["frontier"], "oracle_gain": q["oracle"]["gain_over_mixing"], "two_models": q.get("two_models"),
            "sweeps": sweeps, "wall_s": round(time.monotonic() - t0, 2),
            "cost_weight": AliasSettings.of(policy.aliases["auto"], policy.bandit, {}).cost_weight,
            "first": first_requests(baselines(policy, "auto", scenario.head(FIRST_REQUESTS), seed=seed),  # a cold start
                                    {k: served_by[k] for k, _ in ours})}


def heldout_prior(name: str, path: Path, cands: dict, policy, *, seed: int) -> dict:
    """`aisia train` on the first half of a (shuffled) trace, then the second half replayed with
    the contextual strategy learning online only, and starting from the trained model
    (`contextual.prior_model`), along the sweep: the halves share no request."""
    from aisia_plugin.cli import main as aisia

    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    half = len(lines) // 2
    train, test, model = OUT / f"{name}.train.jsonl", OUT / f"{name}.test.jsonl", OUT / f"{name}.model.json"
    train.write_text("\n".join(lines[:half]) + "\n", encoding="utf-8")
    test.write_text("\n".join(lines[half:]) + "\n", encoding="utf-8")
    if aisia(["train", "--data", str(train), "--deployments", str(OUT / f"{name}.candidates.yaml"), "--out", str(model),
              "--seed", str(seed)]) != 0:
        raise RuntimeError(f"aisia train failed on {train}")
    scenario = build_scenario(load_trace(str(test)), price_specs(cands), policy, seed=seed)
    runs = {label: cost_weight_sweep(with_strategy(policy, "auto", "contextual", prior_model=prior), scenario, seed)
            for label, prior in (("online only", None), ("from the trained model", str(model)))}
    return {"train_requests": half, "test_requests": len(scenario),
            "oracle_gain": runs["online only"]["oracle"]["gain_over_mixing"], "runs": runs}


def diagnose(name: str, path: Path, scenario, policy) -> dict:
    """What the contextual model can know: `aisia train --holdout 0.5`'s figures
    (``replay.training``) and, on prompt_aware, what no router sees: the generator's hidden
    difficulty (per label and difficulty, the ceiling of any prompt feature short of the
    per-request luck) and the exact expected score given its signals; there each predictor's
    (strong - weak) reward gap as a detector of the difficulty (the area under the ROC curve)."""
    t0 = time.monotonic()
    h = training.split(policy, training.training_rows(policy, "auto", scenario.trace, scenario), scenario, 0.5)
    c = policy.aliases["auto"].contextual
    preds = training.reference_predictors(h, training.fit(h.train, c), c)
    meta = json.loads(path.with_suffix(".meta.json").read_text(encoding="utf-8"))
    hard = set(meta.get("hard", ()))
    if "hard" in meta:
        known = h.means(lambda r: (r.record.label, r.record.index in hard))
        preds["hidden difficulty known"] = [{k: known[((r.record.label, r.record.index in hard), k)] for k in h.candidates}
                                            for r in h.test]
        preds["signals known (exact)"] = [{k: scenarios.expected_score(meta, r.record.label, scenarios.prompt_signals(
            r.features.text), k) for k in h.candidates} for r in h.test]
    figs = training.evaluate(h, preds)
    if "hard" in meta:
        mean = h.means(lambda r: None)
        strong, weak = (f(h.candidates, key=lambda x: mean[(None, x)]) for f in (max, min))
        for label, p in preds.items():
            figs["predictors"][label]["difficulty_auc"] = auc([q[strong] - q[weak] for q in p],
                                                              [r.record.index in hard for r in h.test])
    return {"trace": name, "train_requests": len(h.train), "test_requests": len(h.test), "passes": 1,
            "prior_variance": c.prior_variance, "noise_variance": c.noise_variance, **figs,
            "wall_s": round(time.monotonic() - t0, 2)}


def auc(scores, labels):
    """The area under the ROC curve (Mann-Whitney: the share of (positive, negative) pairs ranked
    right, ties counting half); None without both classes."""
    pos, neg = ([s for s, y in zip(scores, labels) if bool(y) is side] for side in (True, False))
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg)) if pos and neg else None


# -- RESULTS.md ------------------------------------------------------------------------------------
def _fmt(v, spec="{:.4f}"):
    return "-" if v is None else v if isinstance(v, str) else spec.format(v)


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def table(res: dict) -> list[str]:
    has_event = bool(res.get("event"))
    head = ["router", "mean reward", "total cost $", "gain over mixing", "p95 ms", "errors %", "regret", "% of oracle"]
    if has_event:
        head += ["share of X before/during/after", "move-away", "come-back"]
    rows = []
    for name, r in res["rows"].items():
        cells = [f"`{name}`", _fmt(r["mean_score"]), _fmt(r["total_cost_usd"], "{:.4f}"),
                 _fmt(r.get("gain_over_mixing"), "{:+.4f}"), _fmt(r["p95_latency_ms"], "{:.0f}"),
                 _fmt(r["errors_pct"], "{:.2f}"), _fmt(r["regret"], "{:.1f}"), _fmt(r["pct_of_oracle"], "{:.1f}")]
        if has_event:
            m = r.get("move") or {}
            fixed = "fixed" in name
            cells += ["/".join(_fmt(m.get(k), "{:.0%}") for k in ("pre_share", "during_share", "after_share")),
                      _fmt("-" if fixed else m.get("move_away"), "{}"), _fmt("-" if fixed else m.get("come_back"), "{}")]
        rows.append(cells)
    return bench.md_table(head, rows)


def sweep_table(first: str, sweeps: dict, label=str, cpts=("95",), oracle_share: bool = False) -> list[str]:
    """cost_weight sweeps (``cost_weight_sweep``'s measures by label) as a table: each point's gain
    over mixing, the best (and its share of the oracle's), and for two models CPT and APGR."""
    two = any("two_models" in m for m in sweeps.values())
    head = [first] + [p["name"] for p in next(iter(sweeps.values()))["runs"]] + ["best gain"] + (
        ["of the oracle's gain"] if oracle_share else []) + ([f"CPT({k}%)" for k in cpts] + ["APGR"] if two else [])
    return bench.md_table(head, [
        [label(k)] + [f"{p['gain_over_mixing']:+.4f} ({p['mean_score']:.4f}, ${p['total_cost_usd']:.3f})" for p in m["runs"]]
        + [f"{m['best_gain_over_mixing']:+.4f} ({m['best']})"]
        + ([_fmt(m.get("oracle_share"), "{:.1%}")] if oracle_share else [])
        + ([*(cpt_text(m["two_models"]["cpt"][c]) for c in cpts), f"{m['two_models']['apgr']:.3f}"] if two else [])
        for k, m in sweeps.items()])


def heldout_lines(r: dict) -> list[str]:
    h = r.get("heldout")
    if not h:
        return []
    return [f"`aisia train` on the first {h['train_requests']} requests, then the other {h['test_requests']} replayed "
            f"with the contextual strategy (oracle's gain on them {h['oracle_gain']:+.4f}): gain over mixing per "
            "cost_weight.", ""] + sweep_table("contextual", h["runs"]) + [""]


def diagnosis_lines(r: dict) -> list[str]:
    """The full-information diagnosis of the contextual model (``diagnose``)."""
    d = r.get("diagnosis")
    if not d:
        return []
    cws = ", ".join(f"{p['cost_weight']:g}" for p in next(iter(d["predictors"].values()))["points"])
    L = [f"What the contextual model can know (`aisia train --holdout 0.5` prints the rows up to `label mean`): fitted with full information "
         f"(`fit_full_information`, what `aisia train` does) on the first {d['train_requests']} requests, then a greedy "
         f"router, argmax(predicted reward + cost bonus), on the other {d['test_requests']}, swept over cost_weight "
         f"{cws}; beside it the same greedy router on other predictors fitted on the same half (the rows from `ridge` to "
         "`logistic, no hashing`: other models of the same features, `training.model_variants`; `label mean` and the "
         "rows after it read what no router sees: the trace's label, the generator's hidden difficulty or its "
         f"signals). Oracle's gain on the held-out half {d['oracle']['gain_over_mixing']:+.4f}.", ""]
    two = any("apgr" in e for e in d["predictors"].values())
    hard = any("difficulty_auc" in e for e in d["predictors"].values())
    head = ["predictor", "best gain over mixing", "at cost_weight", "of the oracle's gain", "squared error"]
    head += (["AUC of the strong-weak gap for the hidden difficulty"] if hard else []) + (["CPT(95%)", "APGR"] if two else [])
    og = d["oracle"]["gain_over_mixing"]
    rows = [[label, f"{e['best_gain_over_mixing']:+.4f}", f"{e['best_cost_weight']:g}",
             f"{e['best_gain_over_mixing'] / og:.1%}" if og > 0 else "-", f"{e['mse']:.4f}"]
            + ([_fmt(e.get("difficulty_auc"), "{:.3f}")] if hard else [])
            + ([cpt_text(e.get("cpt95")), f"{e['apgr']:.3f}" if "apgr" in e else "-"] if two else [])
            for label, e in d["predictors"].items()]
    return L + bench.md_table(head, rows) + [""]


def sweep_lines(r: dict) -> list[str]:
    """The cost_weight sweep of a trace: each point's gain over mixing, the best, CPT and APGR."""
    sw = r.get("sweeps") or {}
    if not sw:
        return []
    two = r.get("two_models")
    L = [f"cost_weight sweep of `auto` ({len(next(iter(sw.values()))['runs'])} runs per strategy, the same trace): gain "
         f"over mixing at each point (mean reward, total cost); the oracle's gain is {r['oracle_gain']:+.4f}.", ""
         ] + sweep_table("router", sw, "`{}`".format, ("50", "80", "95"), oracle_share=True)
    if two:
        L += ["", f"Two models: weak `{two['weak']}`, strong `{two['strong']}`; PGR = (score - weak) / (strong - weak); "
                  "CPT(x) = the smallest share of strong-model calls at which the sweep's curve (with the all-weak and "
                  "all-strong ends) recovers x of the gap, random mixing needs x; APGR = the area under it (random: 0.5)."]
    return L + [""]


def summary(results: list[dict]) -> list[str]:
    out = []
    synth = [r for r in results if r["kind"] == "synthetic"]
    lit = lambda r, s: r["rows"][f"litellm {s}"]  # noqa: E731
    bf_score = lambda r: r["rows"][f"best fixed ({r['best_fixed']})"]["mean_score"]  # noqa: E731
    # 1. reward vs each LiteLLM strategy
    wins, losses = [], []
    for r in synth:
        ours = r["rows"]["aisia auto"]["mean_score"]
        for s in LITELLM_STRATEGIES:
            theirs = lit(r, s)["mean_score"]
            (wins if ours > theirs else losses).append(f"{r['name']} vs {s}: {ours:.4f} vs {theirs:.4f}")
    out.append(f"- **Reward above every LiteLLM strategy on every synthetic scenario: {verdict(not losses)}** "
               f"({len(wins)} of {len(wins) + len(losses)} comparisons won)."
               + (f" Lost: {'; '.join(losses)}." if losses else ""))
    for r in synth:
        parts = ", ".join(f"{s} {lit(r, s)['mean_score']:.4f}" for s in LITELLM_STRATEGIES)
        out.append(f"  - {r['name']}: auto {r['rows']['aisia auto']['mean_score']:.4f}; {parts}; best fixed "
                   f"({r['best_fixed']}) {bf_score(r):.4f}; oracle {r['rows']['oracle']['mean_score']:.4f}")
    by = {r["name"]: r for r in synth}
    if "stationary" in by:
        pct = by["stationary"]["rows"]["aisia auto"]["pct_of_oracle"]
        out.append(f"- **Within 10 % of the oracle on stationary: {verdict(pct >= 90)}** "
                   f"(auto reaches {pct:.1f} % of the oracle's mean reward).")
    if "degrade" in by:
        dg = by["degrade"]
        m = dg["rows"]["aisia auto"]["move"]
        mv = m.get("move_away")
        says = verdict(isinstance(mv, int) and mv <= 50) if mv != "n/a" else (
            "NOT MEASURABLE (auto gave X under 20 % of its traffic before the change, so there was no concentration "
            "to move away from)")
        out.append(f"- **Traffic leaves the degraded provider within 50 requests: {says}** "
                   f"(auto: move-away {mv}, come-back {m.get('come_back')}; share of {dg['event']['candidate']} "
                   f"{m.get('pre_share', 0):.0%} before, {m.get('during_share', 0):.0%} during, "
                   f"{(m.get('after_share') or 0):.0%} after). LiteLLM: "
                   + ", ".join(f"{s} {lit(dg, s)['move'].get('move_away')}" for s in LITELLM_STRATEGIES) + ".")
    if "outage" in by:
        og = by["outage"]
        a = og["rows"]["aisia auto"]
        out.append(f"- **Client-visible errors under 1 % after an outage: {verdict(a['errors_pct'] < 1)}** "
                   f"(auto {a['errors_pct']:.2f} % of requests; "
                   + ", ".join(f"{s} {lit(og, s)['errors_pct']:.2f} %" for s in LITELLM_STRATEGIES)
                   + f"; auto move-away {a['move'].get('move_away')}, come-back {a['move'].get('come_back')}).")
    for r in synth:
        a = r["rows"]["aisia auto"]
        cheap = min((lit(r, s) for s in LITELLM_STRATEGIES), key=lambda x: x["total_cost_usd"])
        fast = min((lit(r, s) for s in LITELLM_STRATEGIES), key=lambda x: x["p95_latency_ms"] or 1e18)
        out.append(f"- {r['name']}: cost auto ${a['total_cost_usd']:.4f} vs cheapest LiteLLM ${cheap['total_cost_usd']:.4f}; "
                   f"p95 auto {a['p95_latency_ms']:.0f} ms vs fastest LiteLLM {fast['p95_latency_ms']:.0f} ms.")
    for r in (r for r in results if r["kind"] == "real"):
        rows = r["rows"]
        ours = {k: v for k, v in rows.items() if k.startswith("aisia")}
        best_ours = max(ours.items(), key=lambda kv: kv[1]["mean_score"])
        best_lit = max(((s, lit(r, s)) for s in LITELLM_STRATEGIES), key=lambda kv: kv[1]["mean_score"])
        out.append(f"- {r['name']} (real outcomes): " + ", ".join(
            f"{k.split(' ', 1)[1]} {v['mean_score']:.4f} (${v['total_cost_usd']:.3f})" for k, v in ours.items())
            + f"; best LiteLLM {best_lit[0]} {best_lit[1]['mean_score']:.4f} (${best_lit[1]['total_cost_usd']:.3f}); "
              f"best fixed {r['best_fixed']} {bf_score(r):.4f}; "
              f"oracle {rows['oracle']['mean_score']:.4f}. Best of ours: {best_ours[0]}.")
    return out


def overhead_modes(rep: dict, alias: str, n: int = 16) -> dict:
    """The alias's overhead figures by mode at pool size n (``fixed`` and the other modes)."""
    modes = {**((rep.get("ours_modes", {}).get(str(n)) or {}).get(alias) or {}),
             "fixed": (rep.get("ours", {}).get(str(n)) or {}).get(alias)}
    return {k: v for k, v in modes.items() if isinstance(v, dict) and "p50_us" in v}


def mean_spread(xs: list, spec: str = "{:+.4f}") -> str:
    """The mean of a figure over router seeds, and its spread (min..max) when there are several."""
    spread = f" ({spec.format(min(xs))}..{spec.format(max(xs))})" if len(xs) > 1 else ""
    return spec.format(sum(xs) / len(xs)) + spread


def mean_target(xs: list, target: float, spec: str = "{:+.4f}", most: bool = False, strict: bool = False) -> str:
    """``mean_spread``, and MET or by how much it misses (at least `target`, above it when
    `strict`, or at most it when `most`)."""
    m = sum(xs) / len(xs)
    ok = m <= target if most else (m > target if strict else m >= target)
    return f"{mean_spread(xs, spec)} {verdict(ok)}" + ("" if ok else f", {'over' if most else 'short'} by "
                                                        + spec.format(abs(m - target)).lstrip("+"))


def beside(r: dict, spec: str = "{gain_over_mixing:+.4f}") -> str:
    """LiteLLM's strategies in the same run (router seed 0)."""
    return "LiteLLM (seed 0): " + ", ".join(f"{s} " + spec.format(**r["rows"][f"litellm {s}"]) for s in LITELLM_STRATEGIES)


def ceiling(r: dict) -> str:
    """On stationary (no event: each candidate's quality per domain holds all along, and its prompts'
    words say nothing but their domain), the hindsight row's gain is the most any router reaches."""
    h = r["rows"].get(HINDSIGHT)
    return "" if h is None or r["name"] != "stationary" else (
        f"; the best candidate of each domain known in hindsight, the ceiling of any router on this trace (its "
        f"prompts' words say nothing beyond their domain): {h['gain_over_mixing']:+.4f} at ${h['total_cost_usd']:.4f}")


def issue20_targets(by: dict) -> list[str]:
    """Issue 20's targets of part 2 (the mean over router seeds must meet each; the spread beside)
    and part 3 (the spend target, quoted from benchmarks/spend_target.py's last results)."""
    out, ours = [], ("aisia auto", CONTEXTUAL)
    synth = [by[n] for n in scenarios.SCENARIOS if "by_seed" in by.get(n, {}).get("rows", {}).get(CONTEXTUAL, {})]
    if synth:
        seeds = synth[0]["rows"][CONTEXTUAL]["by_seed"]["seeds"]
        out.append(f"- **Gain over mixing >= 0 at the shipped cost_weight ({synth[0]['cost_weight']:g}) on "
                   f"{', '.join(r['name'] for r in synth)}, mean over router seeds {seeds[0]}-{seeds[-1]} (min..max):** "
                   + "; ".join(f"`{k}`: " + verdict(all(sum(r["rows"][k]["by_seed"]["gain_over_mixing"]) >= 0 for r in synth))
                               for k in ours) + ".")
        out += [f"  - {r['name']}: " + "; ".join(f"{k} {mean_target(r['rows'][k]['by_seed']['gain_over_mixing'], 0.0)}"
                                                 for k in ours) + f"; {beside(r)}" + ceiling(r) + "." for r in synth]
        st = synth[0] if synth[0]["name"] == "stationary" else None
        if st:
            bf = st["rows"][f"best fixed ({st['best_fixed']})"]
            out.append(f"- **stationary: mean reward >= the best fixed candidate's ({st['best_fixed']} {bf['mean_score']:.4f}) "
                       f"at no more cost (${bf['total_cost_usd']:.4f}), mean over router seeds:** " + "; ".join(
                           f"{k}: reward {mean_target(b['mean_score'], bf['mean_score'], '{:.4f}')}, cost "
                           f"{mean_target(b['total_cost_usd'], bf['total_cost_usd'], '${:.4f}', most=True)}"
                           for k in ours for b in [st["rows"][k]["by_seed"]])
                       + "; " + beside(st, "{mean_score:.4f} (${total_cost_usd:.4f})") + ".")
    for name, what, target, strict in (("prompt_aware", "half the oracle's", None, False),
                                       ("routellm_gsm8k", "+0.02", 0.02, False), ("routerarena", "0", 0.0, True)):
        r = by.get(name)
        if not r or not r.get("sweeps"):
            continue
        t = r["oracle_gain"] / 2 if target is None else target
        seed_of = lambda m, k, one: (m.get("best_gain_by_seed") or {}).get(k) or [one]  # noqa: E731
        out.append(f"- **{name}: gain over mixing at the best sweep point {'>' if strict else '>='} {what}"
                   + (f" ({t:+.4f}; " if target is None else " (") + f"oracle "
                   f"{r['oracle_gain']:+.4f}), mean over router seeds:** " + "; ".join(
                       f"{k}: {mean_target(seed_of(m, 'best', m['best_gain_over_mixing']), t, strict=strict)}"
                       for k, m in r["sweeps"].items()) + f"; {beside(r)}.")
        if name == "routellm_gsm8k" and r.get("two_models"):
            out.append("- **routellm_gsm8k: CPT(95%) <= 85 %, mean over router seeds** (a curve that never recovers 95 % "
                       "counts as 100 %; random mixing needs 95 %): " + "; ".join(
                           f"{k}: " + mean_target([1.0 if c is None else c for c in seed_of(
                               m, "cpt95", m["two_models"]["cpt"]["95"])], 0.85, "{:.1%}", most=True)
                           for k, m in r["sweeps"].items()) + ".")
    return out + spend_target_lines()


def spend_target_lines() -> list[str]:
    """Part 3: the realised spend within 10 % of the target over every window of 1,000 requests
    after the first 1,000 (benchmarks/spend_target.py's last results, not replayed here): with a
    floor below 0 (budget.min_multiplier, the target tracked from below too) where the results
    have one, and with the default floor 0 (the target as a cap)."""
    try:
        rep = json.loads((RESULTS_DIR / "spend_target.json").read_text())
    except (OSError, ValueError):
        return ["- Spend target: `benchmarks/results/spend_target.json` is absent (run `benchmarks/spend_target.py`)."]
    runs, covered = {}, {}
    for r in rep["results"]:
        covered.setdefault(r["strategy"], []).append(r["trace"])
        for w in r["rows"]:
            runs.setdefault(w["floor"], []).append(
                (f"{r['trace']} ({r['strategy']}) target ${w['target_usd_per_1k']:.4f}", w,
                 max((x for x in w["windows"].values() if x), key=lambda x: abs(x["deviation"]))))
    source = ("Traces: " + "; ".join(f"{k} on {', '.join(v)}" for k, v in covered.items())
              + f". From `benchmarks/results/spend_target.json` ({rep['meta']['date']}; table in "
              "`results/spend_target.md`), not replayed by run_all (`benchmarks/spend_target.py`).")
    out = []
    for floor in sorted(runs):
        held = runs[floor]
        miss = [(label, w, x) for label, w, x in held if abs(x["deviation"]) > 0.10]
        reading = ("the target tracked from below too" if floor < 0 else
                   "the default, a cap: below the target only where it does not bind")
        out.append(f"- **Spend target within 10 % over every 1,000-request window after the first 1,000, on every "
                   f"trace, budget.min_multiplier {floor:g} ({reading}): {verdict(not miss)}** "
                   f"({len(held) - len(miss)} of {len(held)} runs hold; worst window "
                   f"{max((x['deviation'] for _, _, x in held), key=abs):+.1%}"
                   + "".join(f"; {label}: worst window {x['deviation']:+.1%}, the multiplier at {floor:g} after "
                             f"{x['at_floor']:.0%} of that window's requests ({w['at_floor']:.0%} of all after the "
                             f"first 1,000)" for label, w, x in miss) + ").")
    capped = runs.get(0.0, [])
    over = [label for label, w, _ in capped if w["windows"]["above"]["deviation"] > 0.10]
    if capped:
        out.append(f"- **Spend never more than 10 % over the target in any such window (a target as a cap: \"at most $X "
                   f"per 1,000 requests\", the default floor 0): {verdict(not over)}** ({len(capped) - len(over)} of "
                   f"{len(capped)} runs; highest window "
                   f"{max(w['windows']['above']['deviation'] for _, w, _ in capped):+.1%}). A window under its target "
                   "with the multiplier at 0 is one where the target did not bind: the cost term was off and the router "
                   "spent what the quality it predicts best costs; a floor below 0 spends up to the target there, "
                   "buying price rather than predicted quality (compare the mean scores in `results/spend_target.md`).")
    return out + ["  " + source]


def first_table(results: list[dict]) -> list[str]:
    """Acceptance 3: each trace's first requests beside the whole trace, for UCB1 and contextual."""
    rows = [[r["name"], f"`{k}`"] + [f"{v:{spec}}" for v, spec in zip(
        (w["mean_score"], 1000 * w["total_cost_usd"] / r["requests"], w["gain_over_mixing"],
         h["mean_score"], 1000 * h["cost_per_request_usd"], h["gain_over_mixing"], f["oracle_gain_over_mixing"]),
        (".4f", ".4f", "+.4f") * 2 + ("+.4f",))]
        for r in results if (f := r.get("first")) for k, h in f["runs"].items() for w in [r["rows"][k]]]
    if not rows:
        return []
    n = results[0]["first"]["requests"]
    return ["", f"### The first {n} requests beside the whole trace (issue 20)", "",
            f"Mean reward, $ per 1,000 requests and gain over mixing of the whole trace, then of its first {n} requests "
            "alone (the mixing frontier of the fixed candidates on those requests; `runner.first_requests`), router seed 0.",
            ""] + bench.md_table(["trace", "router", "mean reward", "$/1k", "gain over mixing", f"first {n}: mean reward",
                                  "$/1k", "gain over mixing", "oracle's gain"], rows)


def issue14_targets(results: list[dict]) -> list[str]:
    """Issue 20's targets (and issue 14's), each MET or by how much it misses, and what limits them."""
    out = issue20_targets({r["name"]: r for r in results})
    for r in results:
        P = (r.get("diagnosis") or {}).get("predictors", {})
        m = P.get("model (fit_full_information)")
        if m:
            refs = [k for k in ("signals known (exact)", "hidden difficulty known", "label mean", "domain mean") if k in P]
            out.append(f"- {r['name']}, full information on the first half, greedy on the second (what the model can know; "
                       f"oracle {r['diagnosis']['oracle']['gain_over_mixing']:+.4f} there): the model "
                       f"{m['best_gain_over_mixing']:+.4f}" + "".join(f", {k} {P[k]['best_gain_over_mixing']:+.4f}" for k in refs)
                       + (f"; CPT(95%) of the model {cpt_text(m.get('cpt95'))}" if "cpt95" in m else "") + " (table in its section).")
    for r in results:
        h = r.get("heldout")
        if h:
            out.append(f"- {r['name']}, second half after `aisia train` on the first: best gain over mixing of the "
                       "contextual strategy " + ", ".join(f"{k} {m['best_gain_over_mixing']:+.4f}" for k, m in h["runs"].items())
                       + f" (oracle {h['oracle_gain']:+.4f}; table in its section).")
    for r in results:
        b = ((r.get("sweeps") or {}).get(CONTEXTUAL) or {}).get("best_gain_by_seed") or {}
        if b.get("full_feedback"):
            out.append(f"- {r['name']}, what the partial feedback costs online (a diagnosis): the contextual sweep's best gain "
                       f"over mixing {mean_spread(b['best'])} as a router learns, {mean_spread(b['full_feedback'])} with "
                       "every candidate taught its outcome of each request (router seeds "
                       f"{b['seeds'][0]}-{b['seeds'][-1]}): the most a model letting one outcome teach every deployment "
                       "could recover; the rest of the gap to the full-information fit above is the learning curve's.")
    try:  # benchmarks/decision_overhead.py's last results
        rep = json.loads((RESULTS_DIR / "overhead.json").read_text())
    except (OSError, ValueError):
        rep = {}
    ctx, ucb = overhead_modes(rep, "auto/contextual"), overhead_modes(rep, "auto")
    if "real_prompts" in ctx:
        def cells(m):
            return ", ".join(f"{k.replace('_', ' ')} {m[k]['p50_us']:.1f} / {m[k]['p99_us']:.1f}"
                             for k in ("fixed", "real_prompts", "unseen", "steady") if k in m)

        c = rep.get("conditions", {})
        a, b = c.get("loadavg_1_5_15_start"), c.get("loadavg_1_5_15_end")
        load = (f" Load average (1 min) {a[0]:.1f} at the start of that run and {b[0]:.1f} at its end, on "
                f"{c.get('cpu_count', '?')} cores shared with other jobs: the p99 are the machine's more than the code's."
                if a and b else "")
        out += [f"- **Decision cost (issue 20):** {t}" for t in decision_overhead.ratio_targets(rep)]
        out.append(f"  p50 / p99 us, `auto/contextual`: {cells(ctx)}; `auto` (ucb1) in the same run: {cells(ucb)}. "
                   "fixed: one synthetic 2 KB prompt; real prompts: 400 distinct RouterArena prompts padded to 2 KB, each "
                   "decided twice before timing; unseen: GSM8K prompts padded to 2 KB that the process has never scanned, once "
                   "each; steady: real prompts with an outcome recorded after each decision (untimed). `auto/contextual` is "
                   "the shipped `auto` with `strategy: contextual`." + load)
    else:
        out.append("- Decision cost with the contextual strategy: not in `benchmarks/results/overhead.json` (run "
                   "`benchmarks/decision_overhead.py`).")
    return out


def render(results: list[dict], conditions: dict) -> str:
    c = conditions
    L = ["# Routing benchmark results", "",
         "Generated by `benchmarks/run_all.py` " + ("(`--quick`) " if c["quick"] else "")
         + "- do not edit by hand. Every figure below is measured by that run.", "",
         "## Conditions", "",
         f"- machine: {c['cpu_count']} cores, Python {c['python']}, {c['platform']}",
         f"- LiteLLM {c['litellm']} (real `litellm.Router` strategies via `LiteLLMBaseline`, simulated clock); "
         f"aisia_plugin {c['aisia']}; shipped default policy (`policies/`)",
         f"- seeds: synthetic generator {c['synthetic_seed']}, data conversion {c['data_seed']}, replay/router {c['seed']} "
         f"(the cost_weight sweeps also with router seeds {c['seed'] + 1} to {c['seed'] + EXTRA_SEEDS}, for the spread of "
         "their best point)",
         f"- synthetic: {c['synthetic_requests']} requests per scenario, {c['providers']} providers "
         "(prices from the AISIA seed table, same price in and out), latency lognormal per provider "
         "(medians 300-2600 ms, sigma 0.35, scaled by output length), per-domain Bernoulli/graded quality "
         "with difficulty correlated across providers (see `aisia_plugin/replay/scenarios.py`)",
         f"- real data: {c['data_dir']} (RouteLLM GSM8K {c['gsm8k_requests']} prompts, RouterArena {c['arena_requests']} prompts); "
         "prices: Mixtral $0.6/$0.6, GPT-4-1106 $10/$30 per 1M (in/out), RouterArena from routerarena_model_cost.json "
         "and its recorded inference_cost; GSM8K tokens estimated as chars/4",
         f"- latency model for the real data (none recorded): {c['latency_model']}",
         "- failover: up to 2 more attempts on another candidate for every router (LiteLLM: re-asked after recording the "
         "failure; if it repeats a tried candidate, a seeded random untried one)",
         "- clock: request i at t = i s; mean reward = mean score (a request the client saw fail scores 0); "
         "cost = every attempt's cost; p95 = latency the client waited (sum of attempts); regret = sum of (oracle score - score)",
         "- " + scenarios.EVENT_RESPONSE,
         f"- wall time of this run: {c['wall_s']:.0f} s", "",
         "- gain over mixing: a row's mean reward minus the best mixture of the fixed candidates at the same total cost "
         "(the upper side of their convex hull in the cost-reward plane, flat beyond its ends; `aisia_plugin/replay/quality.py`); "
         "a router that learns nothing scores <= 0, the oracle's gain is the ceiling",
         f"- `{CONTEXTUAL}`: the shipped `auto` alias with `strategy: contextual` (same cost and latency weights)",
         "- real traces shuffled by a fixed seed (`convert_data.shuffled`): the files are ordered",
         "", "## Summary", "", *summary(results), "", "### Targets (issue 20) and prompt-aware routing (issue 14)", "",
         *issue14_targets(results), *first_table(results), ""]
    for r in results:
        ev = r.get("event")
        L += [f"## {r['name']} ({r['kind']}, {r['requests']} requests)", ""]
        if ev:
            L += [f"Event: `{ev['kind']}` on X = `{ev['candidate']}` ({ev.get('why', '')}) for requests "
                  f"[{ev['start']}, {ev['end']})" + (f", factor {ev['factor']:g}" if "factor" in ev else "")
                  + (f", HTTP {ev['status_code']}" if "status_code" in ev else "") + ".", ""]
        L += table(r) + ["", f"Candidates: {', '.join(f'`{x}`' for x in r['candidates'])}. "
                             f"Replay wall time {r['wall_s']:.1f} s.", ""]
        L += sweep_lines(r) + heldout_lines(r) + diagnosis_lines(r)
    L += conversation_lines()
    L += local_first_lines()
    # The decision overhead's one home is results/overhead.md (its ratio targets are quoted above).
    return "\n".join(L + ["## Decision overhead", "", "Per alias and pool size, ours beside LiteLLM's own selection in "
                          "the same run: [results/overhead.md](results/overhead.md) (`benchmarks/decision_overhead.py`, "
                          "run by this script)."]) + "\n"


def conversation_lines() -> list[str]:
    """Routers on simulated conversations through a real proxy (benchmarks/conversation_bench.py's
    last results, not run here)."""
    import conversation_bench

    try:
        rep = json.loads((RESULTS_DIR / "conversations.json").read_text())
    except (OSError, ValueError):
        return ["## Conversations through a real proxy (issue 40)", "",
                "`benchmarks/results/conversations.json` is absent (run `benchmarks/conversation_bench.py`).", ""]
    out = ["## Conversations through a real proxy (issue 40)", "",
           "Simulated users converse with a chat client (a system message, the whole history re-sent each turn, no "
           "session id, no feedback call but `ours+feedback`'s): after a wrong answer most say so in their own "
           "language or regenerate, after a right one some thank; the routers learn only from what the proxy sees "
           "(`ours+judge`: and from a simulated judge grading 2 % of the answers, its cost counted). Quality and cost "
           "over the "
           "last half of the conversations, as shares of the always-best deployment's; the definitions in "
           "[results/conversations.md](results/conversations.md), as a picture: "
           "[results/conversations.png](results/conversations.png). From `benchmarks/conversation_bench.py`, not run "
           "by run_all.", ""]
    for res in rep["workloads"]:
        out += [f"### {conversation_bench.title(res)}", "", f"{res['description']}. Conditions: "
                f"{conversation_bench.conditions_text(res['conditions'])}.", ""]
        out += (conversation_bench.table(res) + [""] + conversation_bench.arm_notes(res)
                + conversation_bench.acceptance(res))
    return out


def local_first_lines() -> list[str]:
    """Local-first's threshold curve through a real proxy (benchmarks/local_first.py's last results,
    not run here)."""
    import local_first

    try:
        return local_first.results_lines(json.loads((RESULTS_DIR / "local_first.json").read_text()))
    except (OSError, ValueError):
        return ["## Local-first with escalation (issue 39)", "",
                "`benchmarks/results/local_first.json` is absent (run `benchmarks/local_first.py`).", ""]


def summary_blocks(results: list[dict], conditions: dict) -> dict[str, list[str]]:
    """docs/benchmarks.md's quotes of this run by marker name, as RESULTS.md has them: the conditions and
    the summary, and the targets (the prose around them is hand-written there)."""
    return {"results": [f"Conditions: {conditions['cpu_count']} cores, Python {conditions['python']}, LiteLLM "
                        f"{conditions['litellm']}; every router replayed on the same traces with the same seeds "
                        "(details in RESULTS.md).", "", *summary(results)],
            "results:targets": issue14_targets(results)}


def write_report(results: list[dict], conditions: dict, summary_page: Path = SUMMARY) -> bool:
    """RESULTS.md, and docs/benchmarks.md's blocks between their markers (False, and a message, when they
    are missing)."""
    RESULTS_MD.write_text(render(results, conditions), encoding="utf-8")
    return bench.replace_blocks(summary_page, summary_blocks(results, conditions))


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, quick=(False, "fewer requests (1000 synthetic, 300 per real data set)"),
                           seed=(0, "router / latency-model / uniform-random seed"),
                           synthetic_seed=scenarios.DEFAULT_SEED, providers=scenarios.DEFAULT_PROVIDERS,
                           only=([], "only these traces (names)"),
                           render_only=(False, "rewrite RESULTS.md from benchmarks/results/*.json (the last run's "
                                               "figures) without replaying"))
    if args.render_only:
        conditions = json.loads((RESULTS_DIR / "conditions.json").read_text())
        names = list(scenarios.SCENARIOS + scenarios.PROMPT_SCENARIOS) + ["routellm_gsm8k", "routerarena"]
        results = [json.loads((RESULTS_DIR / f"{n}.json").read_text()) for n in names if (RESULTS_DIR / f"{n}.json").exists()]
        write_report(results, conditions)
        print(f"wrote {RESULTS_MD.relative_to(REPO)} and {SUMMARY.relative_to(REPO)}'s results from {len(results)} "
              "result files")
        return 0
    t0 = time.monotonic()
    n_syn = 1000 if args.quick else scenarios.DEFAULT_REQUESTS
    real = convert_data.convert_all(OUT, limit=300 if args.quick else None)
    policy = load_policy(None)
    jobs = []  # synthetic first in the report
    for name in scenarios.SCENARIOS + scenarios.PROMPT_SCENARIOS:
        records, meta = scenarios.generate_scenario(name, n=n_syn, n_providers=args.providers, seed=args.synthetic_seed)
        path = scenarios.write_scenario(OUT, name, records, meta)
        jobs.append((name, path, scenarios.candidates_of(meta), ["auto"], meta["event"], "synthetic"))
    for name, (path, cands) in real.items():
        jobs.append((name, path, cands, ["auto", "auto/cheap", "auto/smart"], None, "real"))
    results = []
    for name, path, cands, aliases, event, kind in jobs:
        if args.only and name not in args.only:
            continue
        print(f"[{time.monotonic() - t0:6.1f}s] {name}: replaying {path.name} ...", flush=True)
        scenario = build_scenario(load_trace(str(path)), price_specs(cands), policy, seed=args.seed)
        res = bench_trace(name, path, scenario, cands, policy, aliases, seed=args.seed, event=event, kind=kind)
        if kind == "real":
            res["heldout"] = heldout_prior(name, path, cands, policy, seed=args.seed)
        if name in SWEPT:  # what the model can know: full information on one half, greedy on the other
            res["diagnosis"] = diagnose(name, path, scenario, policy)
        bench.write_results(name, jsonable(res))
        a = res["rows"]["aisia auto"]
        print(f"          auto {a['mean_score']:.4f} ({a['pct_of_oracle']:.1f} % of oracle), {res['wall_s']:.1f} s", flush=True)
        results.append(res)
    if not args.only:  # the decision cost beside LiteLLM's (results/overhead.{json,md}, quoted in the report)
        decision_overhead.main(["--calls", "2000"] + (["--sizes", "16"] if args.quick else []))

    conditions = bench.conditions(
        quick=args.quick, aisia=bench.version("aisia_plugin"), seed=args.seed, synthetic_seed=args.synthetic_seed,
        data_seed=convert_data.DEFAULT_SEED, synthetic_requests=n_syn, providers=args.providers,
        data_dir="../shared/data ($AISIA_SHARED_DATA)", gsm8k_requests=len(bench.read_jsonl(real["routellm_gsm8k"][0])),
        arena_requests=len(bench.read_jsonl(real["routerarena"][0])), latency_model=convert_data.latency_model_text(),
        wall_s=time.monotonic() - t0)
    bench.write_results("conditions", conditions)
    if not args.only:
        write_report(results, conditions)
        print(f"wrote {RESULTS_MD.relative_to(REPO)} and {SUMMARY.relative_to(REPO)}'s results in "
              f"{conditions['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
