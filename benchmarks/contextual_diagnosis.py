"""Is the contextual strategy's model able to rank the deployments per prompt? (issue 14 (a))

    .venv/bin/python benchmarks/contextual_diagnosis.py [--trace prompt_aware] [--passes 1]

Full information, no exploration: the model is fitted with ``fit_full_information`` (what
``aisia train`` does) on the first half of a trace, then a *greedy* router reads its predicted
reward per deployment on each prompt of the second half (held out) and takes
argmax(predicted reward + cost_weight * (1 - price / cost_scale)), the strategy's own cost
bonus, without its sampling. Swept over cost_weight, each point is (total cost, mean score) on
the held-out half, and its gain over mixing is measured against the held-out half's fixed
candidates (``replay.quality``). Beside it, the same greedy router reading other predictors
fitted on the same first half (empirical means, no model):

* ``deployment mean``: each deployment's mean reward (what a context-free router can know);
* ``domain mean``: per (deployment, detected domain) (what the per-domain bandit can know);
* ``label mean``: per (deployment, the trace's label: RouterArena's data set, the synthetic
  domain), unknown to the router;
* ``hidden difficulty known`` (synthetic prompt_aware only): per (deployment, domain label,
  hard), the generator's domain and hidden difficulty read from the trace and its meta file: the ceiling of any prompt
  feature, short of the per-request luck only the oracle sees;
* the oracle (every held-out outcome known).

If the model's best gain is near the difficulty-known ceiling, the features and the model are
not the bottleneck (the online exploration is); if it is near the domain means', the model does
not see the difficulty. Also printed: the squared error of each predictor's reward on the
held-out outcomes (every candidate's), and the area under the ROC curve of the model's
(strong - weak) predicted reward gap as a detector of the hidden difficulty.

Prints; ``run_all.py`` runs it on its traces and keeps the figures in their results
(``diagnosis``), rendered in RESULTS.md."""

from __future__ import annotations

import json
import math
import sys
import time

import bench
import synthetic
from bench import OUT

from aisia_plugin.commands.train import training_rows
from aisia_plugin.contextual import fit_full_information
from aisia_plugin.policy import load_policy
from aisia_plugin.replay.candidates import load_candidates
from aisia_plugin.replay.quality import Point, apgr, cpt, frontier_score, mixing_frontier, pgr, pgr_curve, weak_and_strong
from aisia_plugin.replay.runner import build_scenario
from aisia_plugin.replay.trace import load_trace

COST_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


def prepare(name: str, policy, alias: str = "auto", seed: int = 0):
    """(rows, scenario, meta or None): rows are (vector, domain, rewards by candidate, label, signals)."""
    trace = load_trace(str(OUT / f"{name}.jsonl"))
    cand_file, meta_file = OUT / f"{name}.candidates.yaml", OUT / f"{name}.meta.json"
    scenario = build_scenario(trace, load_candidates(str(cand_file)) if cand_file.exists() else {}, policy, seed=seed)
    rows = [(vector, domain, rewards, rec.label, signals_of(feats.text))
            for (vector, rewards, domain, feats), rec in zip(training_rows(policy, alias, trace, scenario), trace.records)]
    return rows, scenario, json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.exists() else None


def signals_of(text: str) -> tuple[bool, bool, bool]:
    """Which of the prompt_aware generator's difficulty signals the prompt shows (its demanding
    clause, its context sentences, its list of constraints)."""
    return (any(w in text for ws in synthetic.HARD_WORDS.values() for w in ws),
            any(c in text for c in synthetic.CONTEXT_SENTENCES), "Constraints:" in text)


def exact_expected(meta: dict, domain: str, signals, cand: str) -> float:
    """E[score | domain, the signals the prompt shows] under the prompt_aware generator's model
    (synthetic.py): P(hard | signals) by Bayes, then each difficulty's success probability q'
    (a 1/0 score's mean), or for a graded domain E[clamp(0.5 + q' - u, 0, 1)], u uniform."""
    m = meta["model"]
    p = meta["providers"][cand]
    like = {}
    for hard in (True, False):
        ps = m["signal_if_hard"] if hard else m["signal_if_easy"]
        prior = m["hard_share"] if hard else 1.0 - m["hard_share"]
        like[hard] = prior * math.prod(ps if s else 1.0 - ps for s in signals)
    ph = like[True] / (like[True] + like[False])
    q = p["quality"][domain]
    out = 0.0
    for hard, w in ((True, ph), (False, 1.0 - ph)):
        qq = q * (1.0 - p["hard_penalty"]) if hard else 1.0 - (1.0 - q) * m["easy_error_share"]
        if domain in meta["model"].get("graded_domains", ("translation", "general")):
            a = 0.5 + qq
            e = a * a / 2.0 if a <= 1.0 else 2.0 * a - 1.0 - a * a / 2.0
        else:
            e = qq
        out += w * e
    return out


def greedy_choices(preds, calls, prices, cw, scale):
    return [max(row, key=lambda c: p[c] + cw * max(0.0, 1.0 - prices[c] / scale)) for p, row in zip(preds, calls)]


def curve(preds, calls, prices, scale, frontier, fixed):
    pts, shares = [], []
    two = weak_and_strong({p.name: p for p in fixed})
    for cw in COST_WEIGHTS:
        picks = greedy_choices(preds, calls, prices, cw, scale)
        s = sum(row[c].score for c, row in zip(picks, calls)) / len(calls)
        c = sum(row[c].cost_usd for c, row in zip(picks, calls))
        pts.append({"cost_weight": cw, "mean_score": s, "total_cost_usd": c, "gain_over_mixing": s - frontier_score(frontier, c)})
        if two is not None:
            fx = {p.name: p for p in fixed}
            shares.append((sum(1 for k in picks if k == two[1]) / len(picks), pgr(s, fx[two[0]].score, fx[two[1]].score)))
    best = max(pts, key=lambda p: p["gain_over_mixing"])
    out = {"points": pts, "best_gain_over_mixing": best["gain_over_mixing"], "best_cost_weight": best["cost_weight"]}
    if two is not None:
        cv = pgr_curve(shares)
        out["cpt95"] = cpt(cv, 0.95)
        out["apgr"] = apgr(cv)
    return out


def table_means(rows, key):
    acc = {}
    for r in rows:
        for c, v in r[2].items():
            a = acc.setdefault((key(r), c), [0.0, 0])
            a[0] += v
            a[1] += 1
    return {k: s / n for k, (s, n) in acc.items()}


def auc(scores, labels):
    """The area under the ROC curve (Mann-Whitney: the share of (positive, negative) pairs ranked
    right, ties counting half); None without both classes."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    if not pos or not neg:
        return None
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def diagnose(name: str, policy, *, passes: int = 1, prior_variance=None, noise_variance=None, seed: int = 0) -> dict:
    t0 = time.monotonic()
    rows, scenario, meta = prepare(name, policy, seed=seed)
    hard_ones = set(meta["hard"]) if meta and "hard" in meta else None
    hard = None if hard_ones is None else [i in hard_ones for i in range(len(rows))]
    half = len(rows) // 2
    train, test = rows[:half], rows[half:]
    calls = scenario.calls[half:]
    deps = scenario.deployments(policy)
    prices = {c: (d.input_cost_per_1m + d.output_cost_per_1m) / 2.0 for c, d in deps.items()}
    scale = policy.bandit.cost_scale_per_1m
    cands = scenario.candidates
    fixed = [Point(sum(r[c].cost_usd for r in calls), sum(r[c].score for r in calls) / len(calls), c) for c in cands]
    frontier = mixing_frontier(fixed)
    oracle_s = oracle_c = 0.0
    for best in (max(row.values(), key=lambda x: (x.score, -x.cost_usd)) for row in calls):
        oracle_s, oracle_c = oracle_s + best.score, oracle_c + best.cost_usd
    oracle_s /= len(calls)
    c = policy.aliases["auto"].contextual
    pv = prior_variance if prior_variance is not None else c.prior_variance
    nv = noise_variance if noise_variance is not None else c.noise_variance
    model = fit_full_information([(r[0], r[2]) for r in train], prior_variance=pv, noise_variance=nv, passes=passes)
    ids = list(cands)
    zero = [0.0] * len(ids)
    model_preds = [dict(zip(ids, model.predict(ids, r[0], zero, zero, 0.0, 1.0, pv)[0])) for r in test]
    dep_mean = table_means(train, lambda r: None)
    dom_mean = table_means(train, lambda r: r[1])
    predictors = {"model (fit_full_information)": model_preds,
                  "deployment mean": [{c: dep_mean[(None, c)] for c in ids} for _ in test],
                  "domain mean": [{c: dom_mean.get((r[1], c), dep_mean[(None, c)]) for c in ids} for r in test]}
    lab_mean = table_means(train, lambda r: r[3])
    predictors["label mean"] = [{c: lab_mean.get((r[3], c), dep_mean[(None, c)]) for c in ids} for r in test]
    if hard is not None:
        # The trace's domain label (the generator's), not the detected one: the ceiling.
        hk = table_means([(r[0], r[3], r[2], h) for r, h in zip(train, hard[:half])], lambda r: (r[1], r[3]))
        predictors["hidden difficulty known"] = [{c: hk[((r[3], h), c)] for c in ids} for r, h in zip(test, hard[half:])]
        predictors["signals known (exact)"] = [{c: exact_expected(meta, r[3], r[4], c) for c in ids} for r in test]
    out = {"trace": name, "train_requests": half, "test_requests": len(test), "passes": passes,
           "prior_variance": pv, "noise_variance": nv,
           "frontier": [{"name": p.name, "total_cost_usd": p.cost, "mean_score": p.score} for p in frontier],
           "oracle": {"mean_score": oracle_s, "total_cost_usd": oracle_c,
                      "gain_over_mixing": oracle_s - frontier_score(frontier, oracle_c)},
           "predictors": {}}
    for label, preds in predictors.items():
        se = n = 0  # summed in order, as before (sum() may compensate on newer Pythons)
        for err in ((p[cnd] - v) ** 2 for p, r in zip(preds, test) for cnd, v in r[2].items()):
            se, n = se + err, n + 1
        entry = dict(curve(preds, calls, prices, scale, frontier, fixed), mse=se / n)
        if hard is not None:
            strong = max(ids, key=lambda x: dep_mean[(None, x)])
            weak = min(ids, key=lambda x: dep_mean[(None, x)])
            entry["difficulty_auc"] = auc([p[strong] - p[weak] for p in preds], hard[half:])
        out["predictors"][label] = entry
    out["wall_s"] = round(time.monotonic() - t0, 2)
    return out


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def render(d: dict) -> list[str]:
    L = [f"{d['trace']}: fitted on {d['train_requests']} requests (full information, {d['passes']} pass(es), "
         f"prior_variance {d['prior_variance']:g}, noise_variance {d['noise_variance']:g}), greedy on the other "
         f"{d['test_requests']}; oracle's gain over mixing {d['oracle']['gain_over_mixing']:+.4f}",
         f"{'predictor':32} {'best gain':>9} {'at cw':>6} {'mse':>7} {'auc':>6}   gain per cost_weight"]
    for label, e in d["predictors"].items():
        au = e.get("difficulty_auc")
        pts = " ".join(f"{p['gain_over_mixing']:+.3f}" for p in e["points"])
        L.append(f"{label:32} {e['best_gain_over_mixing']:+9.4f} {e['best_cost_weight']:6g} {e['mse']:7.4f} "
                 f"{'-' if au is None else f'{au:.3f}':>6}   {pts}"
                 + (f"   CPT(95%) {_pct(e['cpt95'])} APGR {e['apgr']:.3f}" if "apgr" in e else ""))
    L.append("cost_weights: " + " ".join(f"{v:g}" for v in COST_WEIGHTS))
    return L


def main(argv=None) -> int:
    args = bench.arguments(__doc__, argv, trace=([], "trace name in benchmarks/out (default: prompt_aware, "
                                                     "routellm_gsm8k, routerarena, those present)"),
                           passes=1, prior_variance=float, noise_variance=float)
    policy = load_policy([str(bench.REPO / "policies")])
    for n in args.trace or [n for n in ("prompt_aware", "routellm_gsm8k", "routerarena") if (OUT / f"{n}.jsonl").exists()]:
        d = diagnose(n, policy, passes=args.passes, prior_variance=args.prior_variance,
                     noise_variance=args.noise_variance)
        print("\n".join(render(d)) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
