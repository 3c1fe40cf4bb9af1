"""The contextual strategy and its model (aisia_plugin/contextual.py, strategies/contextual.py):
stable hashed features, the Kalman update by hand, forgetting, learning per prompt online through
the Engine, the model file (versioned, validated with located errors), the memory store's
snapshot, `aisia train` and a policy starting from its file."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from aisia_plugin.cli import main
from aisia_plugin.contextual import (DIM, ContextualModels, LearnContext, ModelFileError, RequestVector,
                                     check_model, cold_prior, feature_labels, log2_bucket, request_vector)
from aisia_plugin.contextual_io import load_model_file
from aisia_plugin.decision import Deployment
from aisia_plugin.engine import Engine
from aisia_plugin.features import RequestFeatures
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy
from aisia_plugin.policy.errors import PolicyError
from aisia_plugin.policy.models import TaskFitness
from aisia_plugin.state.memory import MemoryState
from aisia_plugin.task_fitness import TaskFitnessTable


def feats(text, **kw):
    return RequestFeatures(text=text, **kw)


# -- features ------------------------------------------------------------------------------------
def test_vector_has_norm_one_and_words_bigrams_and_named_features():
    x = request_vector(feats("Prove that the sum is even."), "math", "analysis")
    labels = feature_labels(feats("Prove that the sum is even."), "math", "analysis")
    assert labels[:6] == ["prove", "that", "the", "sum", "is", "even"]
    assert labels[6:11] == ["prove that", "that the", "the sum", "sum is", "is even"]
    assert labels[11:] == ["bias", "task=analysis", "length=short", "modality=text", "domain=math", "words<8", "lines<2"]
    assert len(x.idx) == len(labels)
    assert float(x.sq.sum()) == pytest.approx(1.0)
    assert x.idx.min() >= 0 and x.idx.max() < DIM
    # the same word has the same slot wherever it stands; case does not matter
    y = request_vector(feats("EVEN so, prove it"), "math", "analysis")
    assert x.idx[5] == y.idx[0] and x.idx[0] == y.idx[2]


def test_empty_text_still_has_the_named_features():
    x = request_vector(feats(""), None, "default")
    assert len(x.idx) == 7 and float(x.sq.sum()) == pytest.approx(1.0)
    assert feature_labels(feats(""), None, "default")[-2:] == ["words<1", "lines<2"]


def test_size_and_shape_buckets():
    assert [log2_bucket("words", n, 128) for n in (0, 1, 2, 3, 4, 7, 8, 100, 127, 128)] == [
        "words<1", "words<2", "words<4", "words<4", "words<8", "words<8", "words<16", "words<128", "words<128",
        "words>=128"]
    # 7 words on 4 lines (a list); the words read stop at MAX_WORDS
    labels = feature_labels(feats("Constraints:\n1. a\n2. b\n3. c"), None, "default")
    assert labels[-2:] == ["words<8", "lines<8"] and labels[:7] == ["constraints", "1", "a", "2", "b", "3", "c"]
    long = feature_labels(feats("word " * 500), None, "default")
    assert long[-2:] == ["words>=128", "lines<2"] and long.count("word") == 128
    # the buckets are slots of the named group: a longer prompt moves its words bucket's slot
    x, y = request_vector(feats("a b c"), None, "default"), request_vector(feats("a b c d e"), None, "default")
    assert x.idx[-2] != y.idx[-2] and x.idx[-1] == y.idx[-1]


def test_hash_is_stable_across_processes():
    code = ("from aisia_plugin.contextual import request_vector; from aisia_plugin.features import RequestFeatures;"
            "print(request_vector(RequestFeatures(text='Écris une fonction Python qui trie'), 'coding', 'coding').idx.tolist())")
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert len(outs) == 1
    assert json.loads(outs.pop()) == request_vector(feats("Écris une fonction Python qui trie"), "coding", "coding").idx.tolist()


# -- prompts, the residual and stale columns -------------------------------------------------
def _texts():
    """Prompts of every shape: short, exactly MAX_WORDS and one more word, long words, separators
    at both ends, multi-byte letters, one word, nothing but separators, and random mixtures."""
    from aisia_plugin.contextual import MAX_BYTES, MAX_WORDS

    r = random.Random(5)
    out = ["", "   ", "word", " word ", "Écris une fonction Python qui trie ...", "a" * (8 * MAX_WORDS + 7),
           " ".join(["w"] * MAX_WORDS), " ".join(["w"] * (MAX_WORDS + 1)), " ".join(["w"] * (MAX_WORDS - 1)) + " ",
           " ".join("x" * 40 for _ in range(60)), ("supercalifragilistic " * 400)[:MAX_BYTES + 50], "1. a\n2. b\n3. c"]
    alphabet = "abcdefghijklmnopqrstuvwxyzéàü0123456789 \n\t.,;:!?()[]{}\"'"
    for _ in range(300):
        n = r.choice((5, 50, 300, 1500, 5000, 9000))
        out.append("".join(r.choice(alphabet) if r.random() < 0.8 else r.choice(" .") * r.randint(1, 3)
                           for _ in range(n)))
    return out


def residual_float64(m: ContextualModels, cols, x: RequestVector):
    """``ContextualModels.residual``'s plain reading: one gather of the prompt's slots, two float64
    dot products."""
    g = np.take(m.mv, x.idx, axis=0)  # (slots, 2, columns)
    return (x.val @ g[:, 0, :])[cols], (x.sq @ g[:, 1, :])[cols]


def test_float32_residual_equals_the_float64_reference():
    m = ContextualModels()
    r = random.Random(3)
    texts = _texts()[:80]
    deps = [f"d{k}" for k in range(6)]
    for k, text in enumerate(texts):
        x = request_vector(feats(text), "math", "default")
        m.learn(deps[k % len(deps)], LearnContext(x, 0.5, 0.05, 0.1), r.random(), float(k), 0.999)
    for text in texts[:20]:
        x = request_vector(feats(text), "coding", "coding")
        for cols in ([0, 1, 2, 3, 4, 5], [5, 3, 0], [2]):
            mean, var = m.residual(cols, x)
            rmean, rvar = residual_float64(m, cols, x)
            assert np.allclose(mean, rmean, rtol=0, atol=1e-6) and np.allclose(var, rvar, rtol=1e-5, atol=0)


def test_a_decision_brings_stale_columns_to_its_tick():
    from aisia_plugin.contextual import STALE_BELOW

    m = ContextualModels()
    r = random.Random(4)
    texts = _texts()[:60]
    deps = [f"d{k}" for k in range(5)]
    for k, text in enumerate(texts):  # d4 learns only among the first ten outcomes, then nothing
        dep = deps[k % 4] if k >= 10 else deps[k % 5]
        m.learn(dep, LearnContext(request_vector(feats(text), None, "default"), 0.5, 0.05, 0.1), r.random(), float(k),
                0.99)
    x = request_vector(feats(texts[12]), None, "default")
    # at each column's own tick the exact residual is what the column materialised then
    for c in range(5):
        mean, var = m.residual_exact([c], x, float(m.tick[c]), 0.99)
        want_mean, want_var = m.residual([c], x)
        assert mean[0] == pytest.approx(float(want_mean[0]), abs=1e-6) and var[0] == pytest.approx(float(want_var[0]), rel=1e-5)
    # a decision at tick 60: d4 (last outcome at tick 9, 0.99**51 < STALE_BELOW) is brought to it, the others
    # (within 10 ticks of their last outcome) are read as they are
    assert 0.99 ** 51 < STALE_BELOW < 0.99 ** 10
    ticks = m.tick.copy()
    before = m.residual(list(range(5)), x)
    zeros = [0.0] * 5
    m.predict(deps, x, zeros, zeros, 60.0, 0.99, 0.05)
    assert m.tick[4] == 60.0 and m.tick[:4].tolist() == ticks[:4].tolist()
    after = m.residual(list(range(5)), x)
    exact = m.residual_exact([4], x, 60.0, 0.99)
    assert after[0][4] == pytest.approx(exact[0][0], abs=1e-6) and after[1][4] == pytest.approx(exact[1][0], rel=1e-5)
    assert after[1][4] > before[1][4] and after[0][:4].tolist() == before[0][:4].tolist()
    # long after its last outcome, a deployment is back at its prior; without forgetting nothing moves
    m.predict(deps, x, zeros, zeros, 60.0 + 5000.0, 1.0, 0.05)
    assert m.tick[4] == 60.0
    m.predict(deps, x, zeros, zeros, 60.0 + 5000.0, 0.99, 0.05)
    mean, var = m.residual([4], x)
    assert float(var[0]) == pytest.approx(0.05, rel=1e-4) and abs(float(mean[0])) < 1e-6


# -- the update ----------------------------------------------------------------------------------
def one_feature(slot=7, value=1.0):
    return RequestVector(np.array([slot]), np.array([value]))


def test_one_observation_is_the_exact_gaussian_update():
    m = ContextualModels()
    x = one_feature()
    v0, s2, base, y = 0.05, 0.1, 0.6, 1.0
    m.learn("a", LearnContext(x, base, v0, s2), y, 1.0, 1.0)
    mean, var = m.residual(m.columns(["a"], v0), x)
    # posterior of w ~ N(0, v0) after y - base = w + noise(s2)
    assert float(mean[0]) == pytest.approx(v0 * (y - base) / (v0 + s2), rel=1e-6)
    assert float(var[0]) == pytest.approx(v0 - v0 * v0 / (v0 + s2), rel=1e-6)
    # a slot nobody saw keeps its prior
    mean2, var2 = m.residual(m.columns(["a"], v0), one_feature(9))
    assert float(mean2[0]) == 0.0 and float(var2[0]) == pytest.approx(v0, rel=1e-6)


def test_forgetting_returns_toward_the_prior_with_the_bandits_gamma():
    def learned(until: float) -> ContextualModels:
        """Slot 7 learned at ticks 1..50; the deployment learns once more (another slot) at `until`."""
        m = ContextualModels()
        for t in range(1, 51):
            m.learn("a", LearnContext(one_feature(), 0.5, 0.05, 0.1), 1.0, float(t), 0.99)
        if until > 50:
            m.learn("a", LearnContext(one_feature(9), 0.5, 0.05, 0.1), 0.5, until, 0.99)
        return m

    def slot7(m):
        mean, var = m.residual(m.columns(["a"], 0.05), one_feature())
        return float(mean[0]), float(var[0])

    mean_now, var_now = slot7(learned(50.0))
    mean_later, var_later = slot7(learned(50.0 + 2000.0))
    assert var_now < 0.01
    assert var_later == pytest.approx(0.05, rel=1e-3)
    assert abs(mean_later) < 1e-3 < mean_now
    # half-life: 69 ticks at gamma 0.99 halve the precision gathered above the prior
    _, var_half = slot7(learned(50.0 + math.log(0.5) / math.log(0.99)))
    assert 1 / var_half - 20.0 == pytest.approx((1 / var_now - 20.0) / 2, rel=1e-4)


def test_a_long_run_of_forgetting_stays_finite():
    """Half-life 1000 ticks (the default), an outcome every 100 ticks for 200,000 ticks: the
    float32 columns are stored as value / scale, and the scale (2**-200 by the end) is rescaled
    before they overflow (at 1e-150 they did: inf, then NaN, after about 127 half-lives)."""
    m = ContextualModels()
    gamma = 0.5 ** (1 / 1000)
    for t in range(1, 200_001, 100):
        m.learn("a", LearnContext(one_feature(), 0.5, 0.05, 0.1), 1.0, float(t), gamma)
    k = m.ids["a"]
    assert np.isfinite(m.hd).all() and np.isfinite(m.mv).all() and m.scale[k] > 1e-20
    mean, var = m.residual(m.columns(["a"], 0.05), one_feature())
    # steady state: about 14 observations per half-life of precision 10 each, mean near 1 - 0.5
    assert 0.4 < float(mean[0]) < 0.5 and 0.001 < float(var[0]) < 0.01


def test_materialising_the_live_slots_equals_materialising_every_slot():
    """After outcomes (with forgetting), stale refreshes, a long gap's rescale, a re-seed and a
    new column, each column's means and variances (rewritten where it ever learned) are exactly
    what rewriting all its slots gives."""
    r = random.Random(9)
    texts = _texts()[:120]
    m = ContextualModels()
    deps = [f"d{k}" for k in range(4)]

    def check():
        full = m.copy()
        for k in range(len(full.ids)):
            full.materialise(k)
        assert full.mv.tobytes() == m.mv.tobytes()

    t = 0.0
    for j, text in enumerate(texts):
        t += r.choice((1.0, 3.0, 40.0))
        if j == 60:
            t += 80_000.0  # scale under 1e-20 at this gamma: the learning column rescales
        x = request_vector(feats(text), r.choice((None, "math")), "default")
        m.learn(r.choice(deps[:3] if j < 90 else deps), LearnContext(x, 0.5, 0.05, 0.1), r.random(), t, 0.999)
        if j % 7 == 0:
            m.predict(deps, x, [1.0] * 4, [0.5] * 4, t, 0.999, 0.05)  # brings stale columns to t
        if j % 20 == 0:
            check()
        if j == 100:
            m.seed(m.copy())  # nothing re-seeded (every column learned) ...
            m.column("late", 0.05)  # ... and a new column
    assert any(live is not None for live in m._live)  # the partial rewrite was taken
    check()


# -- online, through the engine ------------------------------------------------------------------
POLICY = """
    version: 1
    defaults: false
    aliases:
      auto: {strategy: contextual, cost_weight: 0, latency_weight: 0}
"""


def deployments():
    return [Deployment("a", "a", "openai/a", "openai"), Deployment("b", "b", "openai/b", "openai")]


def prompt(kind, rng):
    filler = " ".join(rng.sample(["please", "today", "kindly", "now", "thanks", "team", "quick"], 3))
    return f"{filler} {'summarise the quarterly report' if kind == 'alpha' else 'translate the contract clause'}"


def run_online(engine, n, seed=3):
    """a is right on 'alpha' prompts, b on 'beta' ones (90 % / 10 %); both 0.5 overall."""
    rng = random.Random(seed)
    deps = deployments()
    chosen = []
    for _ in range(n):
        kind = rng.choice(["alpha", "beta"])
        msgs = [{"role": "user", "content": prompt(kind, rng)}]
        d = engine.decide("auto", msgs, deps)
        good = (d.deployment_id == "a") == (kind == "alpha")
        p = 0.9 if good else 0.1
        engine.record(d, Outcome(d.deployment_id, True, quality=1.0 if rng.random() < p else 0.0))
        chosen.append((kind, d.deployment_id))
    return chosen


@pytest.fixture
def policy(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text(textwrap.dedent(POLICY))
    return load_policy([p])


def test_learns_which_deployment_wins_for_which_prompt(policy):
    engine = Engine(policy, clock=lambda: 0.0, rng=random.Random(1))
    chosen = run_online(engine, 600)
    last = chosen[-200:]
    right = sum(1 for kind, dep in last if (dep == "a") == (kind == "alpha"))
    # a router blind to the prompt gets 50 % right here; the contextual one learns the words
    assert right / len(last) > 0.85
    d = engine.decide("auto", [{"role": "user", "content": "now summarise the quarterly report"}], deployments())
    rows = {r.id: r.terms for r in d.scores}
    assert rows["a"]["predicted"] > rows["b"]["predicted"] + 0.3
    assert "predicted reward" in d.reason and d.strategy == "contextual"
    assert d.context is not None  # what the engine teaches the chosen model with
    # explain (as `aisia explain` asks): predictions, uncertainty and the features that moved them
    msgs = [{"role": "user", "content": "summarise the report"}]
    feats = engine.features(msgs).replace(estimate_probability=True)
    ex = {r.id: r.terms for r in engine.decide("auto", msgs, deployments(), features=feats, reserve=False).scores}
    assert ex["a"]["predicted"] > ex["b"]["predicted"]
    assert ex["a"]["uncertainty"] > 0
    assert "summarise" in ex["a"]["moved_by"] or "report" in ex["a"]["moved_by"], ex["a"]["moved_by"]


def test_snapshot_keeps_the_models(policy, tmp_path):
    store = MemoryState()
    engine = Engine(policy, clock=lambda: 0.0, rng=random.Random(1), store=store)
    run_online(engine, 200)
    path = tmp_path / "state.json"
    store.save_file(path)
    again = MemoryState.load_file(path)
    e2 = Engine(policy, clock=lambda: 0.0, rng=random.Random(1), store=again)
    msgs = [{"role": "user", "content": "now summarise the quarterly report"}]
    d1 = engine.decide("auto", msgs, deployments())
    d2 = e2.decide("auto", msgs, deployments())
    t1 = {r.id: r.terms["predicted"] for r in d1.scores}
    t2 = {r.id: r.terms["predicted"] for r in d2.scores}
    assert t1 == pytest.approx(t2)
    assert store.copy().contextual.ids == store.contextual.ids


# -- the model file ------------------------------------------------------------------------------
def test_model_file_round_trip_and_located_errors(tmp_path):
    m = ContextualModels()
    m.learn("a", LearnContext(one_feature(3), 0.5, 0.05, 0.1), 1.0, 1.0, 1.0)
    data = m.dump()
    back = ContextualModels.load(json.loads(json.dumps(data)))
    x = one_feature(3)
    assert back.residual(back.columns(["a"], 0.05), x)[0] == pytest.approx(m.residual(m.columns(["a"], 0.05), x)[0])
    bad = json.loads(json.dumps(data))
    bad["version"] = 99
    bad["deployments"]["a"]["slots"][0] = [DIM, 1.0, 0.5]
    bad["deployments"]["a"]["prior_variance"] = -1
    bad["deployments"]["a"]["colour"] = 1
    problems = check_model(bad)
    assert any(p.startswith("version:") for p in problems)
    assert any(p.startswith("deployments.a.slots[0]:") for p in problems)
    assert any(p.startswith("deployments.a.prior_variance:") for p in problems)
    assert any(p.startswith("deployments.a.colour: unknown field") for p in problems)
    f = tmp_path / "m.json"
    f.write_text(json.dumps(bad))
    with pytest.raises(ModelFileError) as exc:
        load_model_file(f)
    assert str(exc.value).startswith(f"{f}: ")
    f.write_text("{not json")
    with pytest.raises(ModelFileError, match="not JSON"):
        load_model_file(f)


def trace_rows(n, seed=5):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = rng.choice(["alpha", "beta"])
        a, b = (1.0, 0.0) if kind == "alpha" else (0.0, 1.0)
        rows.append({"id": f"r{i}", "messages": [{"role": "user", "content": prompt(kind, rng)}],
                     "outcomes": {"a": {"score": a, "cost_usd": 0.001}, "b": {"score": b, "cost_usd": 0.001}}})
    return rows


def test_train_writes_a_model_a_policy_starts_from(tmp_path, capsys):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in trace_rows(200)))
    pol = tmp_path / "p.yaml"
    pol.write_text(textwrap.dedent(POLICY))
    out = tmp_path / "model.json"
    code = main(["train", "--policy", str(pol), "--data", str(trace), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["format"] == "aisia-contextual-model" and data["version"] == 1
    assert sorted(data["deployments"]) == ["a", "b"] and data["trained"]["requests"] == 200
    started = tmp_path / "started.yaml"
    started.write_text(textwrap.dedent(f"""
        version: 1
        defaults: false
        aliases:
          auto: {{strategy: contextual, cost_weight: 0, latency_weight: 0, contextual: {{prior_model: "{out}"}}}}
        """))
    engine = Engine(load_policy([started]), clock=lambda: 0.0, rng=random.Random(2))
    # before any online outcome, the trained model already sends each kind to its deployment
    for text, best in (("kindly translate the contract clause", "b"), ("thanks summarise the quarterly report", "a")):
        d = engine.decide("auto", [{"role": "user", "content": text}], deployments())
        pred = {r.id: r.terms["predicted"] for r in d.scores}
        other = "a" if best == "b" else "b"
        assert pred[best] > pred[other] + 0.3, pred
    # a broken model file is refused with its place: the policy's field, then the file's
    out.write_text(json.dumps({"format": "aisia-contextual-model", "version": 1, "feature_bits": 3, "deployments": {}}))
    with pytest.raises(PolicyError, match=r"started\.yaml:5:\d+: aliases\.auto\.contextual\.prior_model: .*feature_bits"):
        load_policy([started])
    with pytest.raises(ModelFileError, match="feature_bits"):  # an engine built from a policy loaded before
        Engine(engine.policy)


def test_train_usage_errors(tmp_path, capsys):
    assert main(["train", "--data", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "m.json")]) == 2
    assert "cannot read the trace" in capsys.readouterr().err
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(trace_rows(1)[0]) + "\n")
    assert main(["train", "--data", str(trace), "--out", str(tmp_path / "m.json"), "--alias", "auto/nope"]) == 2


def test_explain_shows_predictions_uncertainty_and_the_features_that_moved_them(policy, tmp_path, capsys):
    store = MemoryState()
    engine = Engine(policy, clock=lambda: 0.0, rng=random.Random(1), store=store)
    run_online(engine, 400)
    state = tmp_path / "state.json"
    store.save_file(state)
    pol = tmp_path / "p.yaml"
    pol.write_text(textwrap.dedent(POLICY))
    cands = tmp_path / "cands.yaml"
    cands.write_text("candidates:\n  a: {provider: openai}\n  b: {provider: openai}\n")
    args = ["explain", "--policy", str(pol), "--deployments", str(cands), "--state", str(state), "--json",
            "summarise the quarterly report"]
    assert main(args) == 0
    rows = {c["id"]: c["terms"] for c in json.loads(capsys.readouterr().out)["decision"]["candidates"]}
    assert rows["a"]["predicted"] > rows["b"]["predicted"]
    assert rows["a"]["uncertainty"] > 0
    assert any(w in rows["a"]["moved_by"] for w in ("summarise", "report", "quarterly"))
    assert main(args[:-2] + ["summarise the quarterly report"]) == 0
    assert "moved_by=" in capsys.readouterr().out


# -- a deployment's prior, known without traffic -------------------------------------------------
COLD_POLICY = """
    version: 1
    aliases:
      auto:
        strategy: contextual
        cost_weight: 0
        latency_weight: 0
        contextual:
          exploration: 0.0
          quality_tolerance: 0.0
          cold_start: {count: 3, price_slope: 0.1}
    quality:
      prior: {by_tier: {ultra: 0.9, free: 0.6}, untiered: 0.4}
    task_fitness:
      default: 0.5
      models:
        "gpt-4o": {coding: 0.9}
    """


def test_cold_prior_by_family_tier_price_and_default():
    policy = load_policy([])
    cold, prior = policy.aliases["auto"].contextual.cold_start, policy.quality.prior
    assert (cold.count, cold.price_slope, prior.untiered) == (2.0, 0.0, 0.5)  # the schema's defaults
    fam = Deployment("fam", "fam", "openai/gpt-4o", "openai", tier="free", input_cost_per_1m=4.0, output_cost_per_1m=4.0)
    tier = Deployment("tier", "tier", "x/y", "x", tier="ultra", input_cost_per_1m=1.0, output_cost_per_1m=1.0)
    plain = Deployment("plain", "plain", "x/z", "x", input_cost_per_1m=1.0, output_cost_per_1m=1.0)
    free = Deployment("free", "free", "ollama/q", "ollama", input_cost_per_1m=0.0, output_cost_per_1m=0.0)
    deps = [fam, tier, plain, free]
    # defaults: no price slope; the family's fitness (0.9 here), else the declared prior quality
    # (quality.prior: the tier's, else untiered)
    assert cold_prior(deps, [0.9, None, None, None], cold, prior) == [0.9, 0.85, 0.5, 0.5]
    c = cold.model_copy(update={"price_slope": 0.1})
    p = prior.model_copy(update={"untiered": 0.4, "by_tier": {"ultra": 0.9}})
    # prices 4, 1, 1, 0: median 1; fam 2 doublings over it (+0.2), free: no price, no slope;
    # a tier by_tier does not name falls back to untiered
    got = cold_prior(deps, [0.7, None, None, None], c, p)
    assert got == pytest.approx([0.9, 0.9, 0.4, 0.4])
    assert cold_prior([fam, plain], [0.95, None], c, p)[0] == 1.0  # median 2.5: 0.95 + 0.068, clamped
    assert cold_prior([fam], [None], c, p) == pytest.approx([0.4])  # the table does not know it: no family fitness
    # the family's fitness left out: fam falls back to its tier (free: untiered, by_tier has none)
    assert cold_prior(deps, [0.9, None, None, None], cold.model_copy(update={"from_task_fitness": False}),
                      prior) == [0.55, 0.85, 0.5, 0.5]


def test_the_family_fitness_of_a_task_the_row_does_not_score_is_the_rows_mean():
    # The shipped table: a family it knows starts from its score for the task, else (a prompt
    # of no particular task, "default") from the mean of its row, never from the table's default
    # as an unknown model would (before, the synthetic pool's llama and mixtral deployments
    # started as unknown ones on such prompts); a family it does not know: None.
    table = TaskFitnessTable(load_policy([]).task_fitness)
    llama = table._rows[table.pattern_for("fireworks-llama-405b")]
    assert table.family_fitness("fireworks-llama-405b", "coding") == llama["coding"] == 0.72
    assert table.family_fitness("fireworks-llama-405b", "default") == pytest.approx(sum(llama.values()) / len(llama))
    assert table.family_fitness("fireworks-llama-405b", None) == table.family_fitness("x/llama-3", "default")
    assert table.fitness("fireworks-llama-405b", "default") == table.default  # what the pool's task_fit says
    assert table.family_fitness("deepseek-v3", "default") is None
    assert table.family_fitness("", "coding") is None
    row = TaskFitnessTable(TaskFitness(default=0.5, models={"m*": {"coding": 0.9, "default": 0.6}}, boosts=[]))
    assert row.family_fitness("m1", "review") == 0.6  # the row's own default key first


def test_a_known_family_starts_from_its_rows_mean_on_a_prompt_of_no_particular_task():
    from aisia_plugin.replay.runner import with_strategy

    policy = with_strategy(load_policy([]), "auto", "contextual")
    engine = Engine(policy, clock=lambda: 0.0, rng=random.Random(1))
    deps = [Deployment("fw", "fw", "fireworks-llama-405b", "fireworks", input_cost_per_1m=0.9, output_cost_per_1m=0.9),
            Deployment("ds", "ds", "deepseek-v3", "deepseek", input_cost_per_1m=0.5, output_cost_per_1m=0.5)]
    d = engine.decide("auto", [{"role": "user", "content": "Give me three ideas for a team-building day."}], deps)
    assert d.task_type == "default"
    m = engine.contextual
    llama = TaskFitnessTable(policy.task_fitness).family_fitness("fireworks-llama-405b", "default")
    assert float(m.prior_mean[m.ids["fw"]]) == pytest.approx(llama) and llama > 0.7  # not the table's 0.5
    assert float(m.prior_mean[m.ids["ds"]]) == 0.5  # a family the table does not know, no tier: quality.prior.untiered


def test_a_deployment_met_for_the_first_time_starts_from_its_cold_prior(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text(textwrap.dedent(COLD_POLICY))
    policy = load_policy([p])
    engine = Engine(policy, clock=lambda: 0.0, rng=random.Random(1))
    deps = [Deployment("cheap", "cheap", "x/cheap", "x", tier="free", input_cost_per_1m=0.5, output_cost_per_1m=0.5),
            Deployment("fam", "fam", "openai/gpt-4o", "openai", input_cost_per_1m=2.0, output_cost_per_1m=2.0),
            Deployment("big", "big", "x/big", "x", tier="ultra", input_cost_per_1m=8.0, output_cost_per_1m=8.0)]
    d = engine.decide("auto", [{"role": "user", "content": "write a python function that parses a csv file"}], deps)
    assert d.task_type == "coding"
    m = engine.contextual
    # median price 2: cheap 0.6 - 0.2, fam (coding 0.9) + 0, big 0.9 + 0.2 -> 1.0
    got = {dep: float(m.prior_mean[m.ids[dep]]) for dep in ("cheap", "fam", "big")}
    assert got == pytest.approx({"cheap": 0.4, "fam": 0.9, "big": 1.0})
    assert all(m.prior_count[m.ids[dep]] == 3.0 for dep in got)
    rows = {r.id: r.terms for r in d.scores}
    assert rows["big"]["base"] == pytest.approx(1.0) and rows["cheap"]["base"] == pytest.approx(0.4)
    assert d.deployment_id == "big"  # no spread, no cost or latency weight: the best prior wins
    # learned since: a deployment's prior is set once (the next request's task changes nothing)
    engine.record(d, Outcome("big", True, quality=0.0))
    engine.decide("auto", [{"role": "user", "content": "hello there"}], deps)
    assert float(m.prior_mean[m.ids["fam"]]) == pytest.approx(0.9)
    # a prior model file's deployment keeps the file's prior (seed before any decision)
    assert m.start("fam", 0.05, 0.1, 1.0) == m.ids["fam"] and float(m.prior_mean[m.ids["fam"]]) == pytest.approx(0.9)


def test_a_columns_values_are_stored_together():
    """Rewriting a column's means and variances after an outcome reads its stored values as one
    block (the view ``hd`` keeps the slot x 2 x column shape every reader uses)."""
    m = ContextualModels()
    for dep in ("a", "b", "c"):
        m.learn(dep, LearnContext(request_vector(feats("some words here"), None, "default"), 0.5, 0.05, 0.1), 0.9,
                1.0, 0.99)
    k = m.ids["b"]
    assert m._hdc[k].flags.c_contiguous and m.hd[:, :, k].flags.c_contiguous
    assert m.hd.shape == m.mv.shape == (DIM, 2, 3)
    assert np.array_equal(m.hd[:, :, k], m._hdc[k]) and (m.dp[:, k] > 0).any()
