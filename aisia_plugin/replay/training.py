"""The contextual strategy's model fitted offline from a trace (`aisia train`), and how well it
ranks the deployments on requests it was not fitted on (`aisia train --holdout FRACTION`).

Full information, no exploration: the model is fitted with ``fit_full_information`` on the first
part of the trace, then a *greedy* router reads its predicted reward per deployment on each prompt
of the held-out rest and takes argmax(predicted reward + the strategy's cost bonus,
``bandit.cost_bonus``), without its sampling (the price it reads: the mean of a deployment's input
and output prices). Swept over COST_WEIGHTS, each point is (total cost, mean score) on the held-out
part, and its gain over mixing is measured against the held-out part's fixed candidates
(``replay.quality``). Beside it, the same greedy router reading other models of the same rows
(``model_variants``: issue 20's ideas, each one change from the model) and reference
predictors fitted on the same first part (empirical means, no model): each deployment's mean
reward (what a context-free router can know), its mean per detected domain (what the per-domain
bandit can know) and, when the trace labels its requests, per label (unknown to the router)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

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
    labels: list  # what each entry of `vector` is (contextual.feature_labels): a word, a bigram, a named feature


def training_rows(policy, alias: str, trace, scenario) -> list[TrainingRow]:
    """Per request of the trace, with the engine's features and reward for ``alias``: what the
    model is fitted on."""
    from ..contextual import feature_labels, request_vector
    from ..engine import Engine
    from ..outcome import reward

    ap, engine, rows = policy.aliases[alias], Engine(policy), []
    for rec, calls in zip(trace.records, scenario.calls):
        feats, present = engine.scanner.scan(rec.messages, None, None)
        domain = ap.domain_hint or engine.detector.detect(feats.text, present)
        # (An ungraded success is scored with the candidate's quality estimate, as online.)
        rewards = {name: reward(call.outcome(), policy.reward, ap.sla.target_p95_ms,
                                engine.quality_estimate(name, domain)) for name, call in calls.items()}
        task = ap.task_hint or feats.task_type
        rows.append(TrainingRow(request_vector(feats, domain, task), rewards, domain, feats, rec,
                                feature_labels(feats, domain, task)))
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


# -- other models of the same rows, beside the contextual one (issue 20's ideas) -------------------
# Each is fitted on the rows of a Holdout's first part with the full information the contextual
# model's offline fit gets, and its priors are the alias's contextual settings (prior_variance:
# a weight's prior variance on a norm-1 vector; noise_variance: an outcome's), so that a row of
# the diagnosis differs from the model's in one idea only. They solve their problem exactly
# (conjugate gradients, Newton), where the online model is one pass of a diagonal approximation.

@dataclass
class Design:
    """Requests as the rows of a sparse matrix X: entry i is X[row[i], col[i]] = val[i], in the
    order of the rows, one entry per (row, column)."""
    row: np.ndarray
    col: np.ndarray
    val: np.ndarray
    n: int  # rows
    d: int  # columns
    keys: list  # each column's key (``designs``), in column order

    def dot(self, w: np.ndarray) -> np.ndarray:
        """X @ w for w of shape (d, k): (n, k)."""
        return np.stack([np.bincount(self.row, self.val * w[self.col, j], minlength=self.n)
                         for j in range(w.shape[1])], axis=1)

    def tdot(self, r: np.ndarray) -> np.ndarray:
        """X.T @ r for r of shape (n, k): (d, k)."""
        return np.stack([np.bincount(self.col, self.val * r[self.row, j], minlength=self.d)
                         for j in range(r.shape[1])], axis=1)


def designs(train: list, test: list, keys: Callable, min_rows: int = 1) -> tuple[Design, Design]:
    """The rows fitted on and the held-out rows as two Designs over one set of columns: one per
    key (``keys(row)``: one per entry of the row's vector, whose values it takes; a key repeated
    in a row sums) met in at least `min_rows` of the rows fitted on. A held-out entry whose key
    has no column is dropped (a weight never fitted is 0, its prior mean)."""
    seen: dict = {}
    for r in train:
        for k in dict.fromkeys(keys(r)):  # first-seen order: the same columns in every process
            seen[k] = seen.get(k, 0) + 1
    cols = {k: i for i, k in enumerate(k for k, n in seen.items() if n >= min_rows)}

    def build(rows):
        R, C, V = [], [], []
        for i, r in enumerate(rows):
            entries: dict = {}
            for k, v in zip(keys(r), r.vector.val.tolist()):
                c = cols.get(k)
                if c is not None:
                    entries[c] = entries.get(c, 0.0) + v
            R += [i] * len(entries)
            C += entries.keys()
            V += entries.values()
        return Design(np.array(R, dtype=np.int64), np.array(C, dtype=np.int64), np.array(V, dtype=float),
                      len(rows), len(cols), list(cols))

    return build(train), build(test)


def hashed_slots(r: TrainingRow) -> list:
    """The keys of the contextual model's own vector: its hashed slots (collisions and all)."""
    return r.vector.idx.tolist()


def exact_labels(r: TrainingRow) -> list:
    """The keys of the vector's entries by what they are (a word, a bigram, a named feature): the
    same features without hashing collisions."""
    return r.labels


def conjugate_gradient(apply: Callable, b: np.ndarray, iterations: int = 1000, tol: float = 1e-10) -> np.ndarray:
    """The solution x of apply(x) = b, `apply` a symmetric positive-definite linear map (of an
    array of b's shape), by conjugate gradients from 0, until the residual's norm is `tol` times
    b's (or `iterations`)."""
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rr = float(np.vdot(r, r))
    stop = tol * tol * max(rr, 1e-300)
    for _ in range(iterations):
        if rr <= stop:
            break
        ap = apply(p)
        a = rr / float(np.vdot(p, ap))
        x += a * p
        r -= a * ap
        new = float(np.vdot(r, r))
        p = r + (new / rr) * p
        rr = new
    return x


def ridge(X: Design, y: np.ndarray, prior_variance, noise_variance) -> np.ndarray:
    """The posterior mean (d, k) of the weights of y (n, k) = X w + noise, w ~ N(0,
    prior_variance) and noise ~ N(0, noise_variance) independent per entry (either a scalar or one
    value per column of y): the exact solution of the linear model the contextual one
    approximates one diagonal step at a time."""
    pv, nv = np.broadcast_to(prior_variance, y.shape[1:]), np.broadcast_to(noise_variance, y.shape[1:])
    return conjugate_gradient(lambda w: X.tdot(X.dot(w)) / nv + w / pv, X.tdot(y) / nv)


def fit_exact(rows, settings):
    """``fit``'s model (its bases, its file format) with each deployment's slots solved exactly:
    the means of the ridge posterior of its rewards less its base over the rows that have one
    (``ridge``), each slot's precision the prior's plus its diagonal of X'X / noise_variance (the
    diagonal the online model keeps). What `aisia train --exact` writes."""
    from ..contextual import ContextualModels

    data = fit(rows, settings).dump()
    for dep, d in data["deployments"].items():
        have = [r for r in rows if dep in r.rewards]
        X, _ = designs(have, [], hashed_slots)
        y = np.array([[r.rewards[dep] - d["base_mean"]] for r in have])
        w = ridge(X, y, settings.prior_variance, settings.noise_variance)[:, 0]
        seen = np.bincount(X.col, X.val * X.val, minlength=X.d) / settings.noise_variance
        prec = 1.0 / d["prior_variance"] + seen
        d["slots"] = [[int(i), float(p * m), float(q)] for i, p, m, q in zip(X.keys, prec, w, seen)]
    return ContextualModels.load(data)


def shared_ridge(X: Design, y: np.ndarray, prior_variance: float, noise_variance: float) -> np.ndarray:
    """Per column k of y, the weights u + v_k (d, k) of y_k = X (u + v_k) + noise: a weight vector
    u shared by every deployment and one v_k of each, each N(0, prior_variance / 2) (so a
    deployment's weights have the prior variance of the per-deployment model), the posterior
    mean. Every outcome teaches u, hence every deployment."""
    k = y.shape[1]

    def apply(t):
        r = X.dot(t[:, :1] + t[:, 1:])
        g = X.tdot(r)
        return np.concatenate((g.sum(axis=1, keepdims=True), g), axis=1) / noise_variance + t / (prior_variance / 2.0)

    g = X.tdot(y)
    t = conjugate_gradient(apply, np.concatenate((g.sum(axis=1, keepdims=True), g), axis=1) / noise_variance)
    return t[:, :1] + t[:, 1:1 + k]


def reduced_rank(X: Design, w: np.ndarray, rank: int = 1) -> np.ndarray:
    """The weights `w` (d, k) of a linear model of k deployments reduced to `rank` directions
    across the deployments: the top `rank` right singular vectors of its fitted values X w (the
    reduced-rank regression of Izenman 1975, on a ridge fit). Rank 1: one latent score of the
    prompt (its difficulty) and a sensitivity to it per deployment."""
    v = np.linalg.svd(X.dot(w), full_matrices=False)[2][:rank].T
    return w @ v @ v.T


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def logistic(X: Design, y: np.ndarray, offset: np.ndarray, prior_variance: np.ndarray,
             newton_steps: int = 25) -> np.ndarray:
    """The most probable weights (d, k) of P(y_k = 1) = sigmoid(offset_k + X w_k), w_k ~ N(0,
    prior_variance_k) (a fractional y counts as that share of a success: the cross-entropy), by
    Newton's method (each step's system by conjugate gradients) from 0."""
    w = np.zeros((X.d, y.shape[1]))
    for _ in range(newton_steps):
        p = _sigmoid(offset + X.dot(w))
        s = p * (1.0 - p)
        grad = X.tdot(p - y) + w / prior_variance
        step = conjugate_gradient(lambda v: X.tdot(s * X.dot(v)) + v / prior_variance, grad)
        w -= step
        if float(np.abs(step).max(initial=0.0)) < 1e-6:
            break
    return w


def online_logistic(X: Design, y: np.ndarray, offset: np.ndarray, prior_variance: np.ndarray) -> np.ndarray:
    """The weights' means (d, k) after learning the rows of X in order, once, with the diagonal
    Laplace approximation of online logistic regression (Chapelle & Li 2011, algorithm 3): what
    the contextual model does with a linear likelihood, with a Bernoulli one. Per outcome, the
    log-odds z solving z = z0 + s2 (y - sigmoid(z)) (z0, s2: the prior's mean and variance of
    the log-odds), then each slot's mean moved by (y - sigmoid(z)) x / precision and its
    precision raised by sigmoid'(z) x**2: per slot a mean and a precision, as online."""
    mean = np.zeros((X.d, y.shape[1]))
    prec = np.tile(1.0 / np.asarray(prior_variance, dtype=float), (X.d, 1))
    ends = np.searchsorted(X.row, np.arange(X.n + 1))
    for i in range(X.n):
        idx, x = X.col[ends[i]:ends[i + 1]], X.val[ends[i]:ends[i + 1]]
        for k in range(y.shape[1]):
            z0 = offset[k] + float(x @ mean[idx, k])
            s2 = float((x * x) @ (1.0 / prec[idx, k]))
            z = z0
            for _ in range(50):  # Newton on z - z0 - s2 (y - sigmoid(z)) = 0 (increasing in z)
                p = _sigmoid(z)
                step = (z - z0 - s2 * (y[i, k] - p)) / (1.0 + s2 * p * (1.0 - p))
                z -= step
                if abs(step) < 1e-12:
                    break
            p = _sigmoid(z)
            mean[idx, k] += (y[i, k] - p) * x / prec[idx, k]
            prec[idx, k] += p * (1.0 - p) * x * x
    return mean


def _logit(p):
    p = np.clip(p, 1e-3, 1.0 - 1e-3)
    return np.log(p / (1.0 - p))


def model_variants(h: Holdout, settings) -> dict[str, list[dict]]:
    """Per other model of the rows fitted on, its predicted reward per candidate on each held-out
    request (see the comment above ``Design``). Each predicts a deployment's reward as its mean
    on the rows fitted on plus a learned function of the prompt:
    - "ridge": the contextual model's own problem (its vector, prior and noise), solved exactly;
    - "ridge, no hashing": keyed by what each feature is (no collisions between words);
    - "ridge, words in >= 2 prompts": a feature met in one prompt only dropped (selection);
    - "shared + per-deployment": one weight vector for every deployment plus one each;
    - "ridge, rank 1": the ridge fit reduced to one direction across the
      deployments (a latent score of the prompt, each deployment's sensitivity to it);
    - "difference to the cheapest": each deployment's reward minus the cheapest one's, learned
      (on two models, strong - weak), with the prior of a difference of two weights
      (2 x prior_variance) and the noise of the difference measured on the rows fitted on;
    - "logistic": a Bernoulli likelihood on the log-odds scale, offset by the deployment's mean,
      its prior variance the linear one carried through the sigmoid's slope at that mean
      (prior_variance / (m (1 - m))**2: the same spread of predicted rewards near the mean);
    - "logistic, no hashing": both;
    - "logistic, online diagonal": the logistic likelihood learned as the contextual model learns
      (one pass, a mean and a precision per slot): what making it online would keep."""
    ids = h.candidates
    train = [r for r in h.train if all(c in r.rewards for c in ids)]  # the rows with every outcome
    h = Holdout(train, h.test, h.calls, ids, h.prices, h.cost_scale)
    y = np.array([[r.rewards[c] for c in ids] for r in h.train])
    mean = y.mean(axis=0)
    pv, nv = settings.prior_variance, settings.noise_variance
    Xh, Th = designs(h.train, h.test, hashed_slots)
    Xl, Tl = designs(h.train, h.test, exact_labels)
    Xs, Ts = designs(h.train, h.test, exact_labels, min_rows=2)

    def rows(pred):
        return [dict(zip(ids, p)) for p in pred.tolist()]

    w = ridge(Xh, y - mean, pv, nv)
    out = {"ridge": rows(mean + Th.dot(w)),
           "ridge, no hashing": rows(mean + Tl.dot(ridge(Xl, y - mean, pv, nv))),
           "ridge, words in >= 2 prompts": rows(mean + Ts.dot(ridge(Xs, y - mean, pv, nv))),
           "shared + per-deployment": rows(mean + Th.dot(shared_ridge(Xh, y - mean, pv, nv))),
           "ridge, rank 1": rows(mean + Th.dot(reduced_rank(Xh, w)))}
    ref = min(range(len(ids)), key=lambda j: h.prices[ids[j]])
    others = [j for j in range(len(ids)) if j != ref]
    d = y[:, others] - y[:, [ref]]
    dm = d.mean(axis=0)
    gap = dm + Th.dot(ridge(Xh, d - dm, 2.0 * pv, np.maximum(d.var(axis=0), 1e-6)))
    pred = np.full((Th.n, len(ids)), mean[ref])
    pred[:, others] += gap
    out["difference to the cheapest"] = rows(pred)
    m = np.clip(mean, 0.01, 0.99)
    off = _logit(mean)
    lpv = pv / (m * (1.0 - m)) ** 2
    out["logistic"] = rows(_sigmoid(off + Th.dot(logistic(Xh, np.clip(y, 0.0, 1.0), off, lpv))))
    out["logistic, no hashing"] = rows(_sigmoid(off + Tl.dot(logistic(Xl, np.clip(y, 0.0, 1.0), off, lpv))))
    out["logistic, online diagonal"] = rows(_sigmoid(off + Th.dot(online_logistic(Xh, np.clip(y, 0.0, 1.0), off, lpv))))
    return out


def reference_predictors(h: Holdout, model, settings, label: str = "model (fit_full_information)") -> dict[str, list[dict]]:
    """Per predictor, its predicted reward per candidate on each held-out request: the model,
    the other models of ``model_variants`` (with the alias's contextual `settings`), then the
    means of the rows fitted on (per label only when the trace has labels)."""
    ids = h.candidates
    zero = [0.0] * len(ids)
    dep, dom = h.means(lambda r: None), h.means(lambda r: r.domain)
    out = {label: [dict(zip(ids, model.predict(ids, r.vector, zero, zero, 0.0, 1.0, settings.prior_variance)[0]))
                   for r in h.test],
           **model_variants(h, settings),
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
