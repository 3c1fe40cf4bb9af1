"""The contextual strategy's model fitted offline from a trace (`aisia train`), and how well it
ranks the deployments on requests it was not fitted on (`aisia train --holdout FRACTION`).

Full information, no exploration: the model is fitted with ``fit_full_information`` on the first
part of the trace, then a *greedy* router reads its predicted reward per deployment on each prompt
of the held-out rest and takes argmax(predicted reward + the strategy's cost bonus,
``bandit.cost_bonus``), without its sampling (the price it reads: the mean of a deployment's input
and output prices). Swept over COST_WEIGHTS, each point is (total cost, mean score) on the held-out
part, and its gain over mixing is measured against the held-out part's fixed candidates
(``replay.quality``). Beside it, the same greedy router reading reference
predictors fitted on the same first part (empirical means, no model): each deployment's mean
reward (what a context-free router can know), its mean per detected domain (what the per-domain
bandit can know) and, when the trace labels its requests, per label (unknown to the router)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..bandit import cost_bonus
from .quality import Point, apgr, cpt, frontier_score, mixing_frontier, pgr, pgr_curve, weak_and_strong
from .trace import TraceRecord

COST_WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class TrainingRow(NamedTuple):
    vector: object  # the request's context vector (contextual.request_vector)
    rewards: dict  # candidate -> the reward the engine computes for its recorded outcome
    domain: str
    features: object
    record: TraceRecord  # its index, id and label


def training_rows(policy, alias: str, trace, scenario) -> list[TrainingRow]:
    """Per request of the trace, with the engine's features and reward for ``alias``: what the
    model is fitted on."""
    from ..contextual import request_vector
    from ..engine import Engine
    from ..outcome import reward

    ap, engine, rows = policy.aliases[alias], Engine(policy), []
    for rec, calls in zip(trace.records, scenario.calls):
        feats, present = engine.scanner.scan(rec.messages, None, None)
        domain = ap.domain_hint or engine.detector.detect(feats.text, present)
        rewards = {name: reward(call.outcome(), policy.reward, ap.sla.target_p95_ms) for name, call in calls.items()}
        rows.append(TrainingRow(request_vector(feats, domain, ap.task_hint or feats.task_type), rewards, domain, feats,
                                rec))
    return rows


def fit(rows, settings, *, passes: int = 1):
    """The model fitted with full information on `rows`, with the alias's contextual settings."""
    from ..contextual import fit_full_information

    return fit_full_information([(r.vector, r.rewards) for r in rows], prior_variance=settings.prior_variance,
                                noise_variance=settings.noise_variance, passes=passes)


@dataclass
class Holdout:
    """A trace split in two: the rows fitted on, the held-out rows and their calls."""
    train: list[TrainingRow]
    test: list[TrainingRow]
    calls: list  # per held-out request: candidate -> runner.Call
    candidates: list[str]
    prices: dict  # candidate -> mean of its input and output price per 1M
    cost_scale: float

    def means(self, key) -> dict:
        """Mean reward per (key(row), candidate) over the rows fitted on."""
        acc = {}
        for r in self.train:
            for c, v in r.rewards.items():
                a = acc.setdefault((key(r), c), [0.0, 0])
                a[0] += v
                a[1] += 1
        return {k: s / n for k, (s, n) in acc.items()}


def split(policy, rows: list[TrainingRow], scenario, fraction: float) -> Holdout:
    """The last `fraction` of the rows held out (0 < fraction < 1)."""
    cut = int(len(rows) * (1.0 - fraction))
    deps = scenario.deployments(policy)
    return Holdout(rows[:cut], rows[cut:], scenario.calls[cut:], list(scenario.candidates),
                   {c: (d.input_cost_per_1m + d.output_cost_per_1m) / 2.0 for c, d in deps.items()},
                   policy.bandit.cost_scale_per_1m)


def reference_predictors(h: Holdout, model, prior_variance: float) -> dict[str, list[dict]]:
    """Per predictor, its predicted reward per candidate on each held-out request: the model,
    then the means of the rows fitted on (per label only when the trace has labels)."""
    ids = h.candidates
    zero = [0.0] * len(ids)
    dep, dom = h.means(lambda r: None), h.means(lambda r: r.domain)
    out = {"model (fit_full_information)": [dict(zip(ids, model.predict(ids, r.vector, zero, zero, 0.0, 1.0,
                                                                        prior_variance)[0])) for r in h.test],
           "deployment mean": [{c: dep[(None, c)] for c in ids} for _ in h.test],
           "domain mean": [{c: dom.get((r.domain, c), dep[(None, c)]) for c in ids} for r in h.test]}
    if any(r.record.label is not None for r in h.train):
        lab = h.means(lambda r: r.record.label)
        out["label mean"] = [{c: lab.get((r.record.label, c), dep[(None, c)]) for c in ids} for r in h.test]
    return out


def _curve(preds, h: Holdout, frontier, fixed) -> dict:
    """The greedy router reading `preds`, swept over COST_WEIGHTS: each point, the best gain over
    mixing and, with two candidates, CPT(95%) and APGR."""
    pts, shares = [], []
    two = weak_and_strong({p.name: p for p in fixed})
    fx = {p.name: p for p in fixed}
    for cw in COST_WEIGHTS:
        bonus = {c: cost_bonus(price, cw, h.cost_scale) for c, price in h.prices.items()}
        picks = [max(row, key=lambda c: p[c] + bonus[c]) for p, row in zip(preds, h.calls)]
        s = sum(row[c].score for c, row in zip(picks, h.calls)) / len(h.calls)
        c = sum(row[c].cost_usd for c, row in zip(picks, h.calls))
        pts.append({"cost_weight": cw, "mean_score": s, "total_cost_usd": c, "gain_over_mixing": s - frontier_score(frontier, c)})
        if two is not None:
            shares.append((sum(1 for k in picks if k == two[1]) / len(picks), pgr(s, fx[two[0]].score, fx[two[1]].score)))
    best = max(pts, key=lambda p: p["gain_over_mixing"])
    out = {"points": pts, "best_gain_over_mixing": best["gain_over_mixing"], "best_cost_weight": best["cost_weight"]}
    if two is not None:
        cv = pgr_curve(shares)
        out["cpt95"] = cpt(cv, 0.95)
        out["apgr"] = apgr(cv)
    return out


def evaluate(h: Holdout, predictors: dict[str, list[dict]]) -> dict:
    """The held-out figures: the mixing frontier, the oracle, and per predictor its curve and the
    squared error of its rewards on every held-out outcome."""
    calls = h.calls
    fixed = [Point(sum(r[c].cost_usd for r in calls), sum(r[c].score for r in calls) / len(calls), c) for c in h.candidates]
    frontier = mixing_frontier(fixed)
    oracle_s = oracle_c = 0.0
    for best in (max(row.values(), key=lambda x: (x.score, -x.cost_usd)) for row in calls):
        oracle_s, oracle_c = oracle_s + best.score, oracle_c + best.cost_usd
    oracle_s /= len(calls)
    out = {"frontier": [{"name": p.name, "total_cost_usd": p.cost, "mean_score": p.score} for p in frontier],
           "oracle": {"mean_score": oracle_s, "total_cost_usd": oracle_c,
                      "gain_over_mixing": oracle_s - frontier_score(frontier, oracle_c)},
           "predictors": {}}
    for label, preds in predictors.items():
        se = n = 0  # summed in order (sum() may compensate on newer Pythons)
        for err in ((p[cnd] - v) ** 2 for p, r in zip(preds, h.test) for cnd, v in r.rewards.items()):
            se, n = se + err, n + 1
        out["predictors"][label] = dict(_curve(preds, h, frontier, fixed), mse=se / n)
    return out


def format_holdout(figs: dict, train: int, test: int) -> list[str]:
    """The held-out figures as text: one line per predictor, its gain per cost weight."""
    two = any("apgr" in e for e in figs["predictors"].values())
    L = [f"held out: fitted on the first {train} requests, a greedy router on the other {test}; oracle's gain over "
         f"mixing {figs['oracle']['gain_over_mixing']:+.4f}",
         f"{'predictor':30} {'best gain':>9} {'at cw':>6} {'mse':>7}" + ("  CPT(95%)  APGR" if two else "")
         + "   gain per cost_weight (" + " ".join(f"{v:g}" for v in COST_WEIGHTS) + ")"]
    for label, e in figs["predictors"].items():
        c = e.get("cpt95")
        L.append(f"{label:30} {e['best_gain_over_mixing']:+9.4f} {e['best_cost_weight']:6g} {e['mse']:7.4f}"
                 + (f"  {'-' if c is None else f'{c:.1%}':>8} {e['apgr']:5.3f}" if two else "") + "   "
                 + " ".join(f"{p['gain_over_mixing']:+.3f}" for p in e["points"]))
    return L
