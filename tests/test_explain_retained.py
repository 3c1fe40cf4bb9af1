"""What a decision renders (its reason, rows, ranking; the proxy's ``GET /aisia/explain`` entry)
is the same whatever form the decision keeps until it is read.

The reference is ``fixtures/explain_golden.json``: the same decisions rendered by the code of
commit a279871, whose strategies kept their explanations as closures over the pool (run this file
as a script at that commit to write it again: ``python tests/test_explain_retained.py --write``;
the engine's cases, which learn, were written again when a plain success stopped being learned as
quality 1 and untried arms began to be explored in the order of their declared prior,
docs/quality.md, and again when the shipped auto, auto/coding and auto/smart became contextual
(whose decisions now state their selection probability): the direct cases were unchanged by it;
and again when the contextual choice became cost-aware on the quality estimate's posterior,
docs/quality.md#the-choice: only the engine's ``explain/round`` cases moved; and when the
explain entry gained the policy layer that decided it, docs/teams.md: every case's ``layer``,
null here, and nothing else; and when the prior's strength became 3 and the cost-aware choice
read the predictions, docs/quality.md#the-choice: only the engine's ``explain/round`` cases moved; and
when quality evidence got its own, longer memory and a candidate's draw could reach the bar,
docs/quality.md#how-long-evidence-counts: only the engine's ``explain/round`` cases moved; and when
the contextual cold start's tier table folded into ``quality.prior``, whose defaults became its
values (ultra 0.85, pro 0.75, free 0.55, untiered 0.5): only the engine's ``explain/round`` cases
moved).
Every built-in strategy is covered (ucb1, thompson, cost, latency, sla-aware, lkgp, rules,
contextual), with untried arms, learned arms, OPEN breakers, every candidate OPEN, epsilon-greedy
exploration drawing and not drawing, ties, and the engine's own exclusions; the contextual
strategy also as ``aisia explain`` asks it (``estimate_probability``: its rows name the features
that moved each prediction)."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from helpers import context  # noqa: E402

from aisia_plugin import plugins  # noqa: E402
from aisia_plugin.bandit import ArmStats  # noqa: E402
from aisia_plugin.decision import Candidate, Deployment  # noqa: E402
from aisia_plugin.policy.models import Sla  # noqa: E402

GOLDEN = HERE / "fixtures" / "explain_golden.json"
STRATEGIES = ("ucb1", "thompson", "cost", "latency", "sla-aware", "lkgp", "rules")

POLICY = """\
version: 1
bandit: {per_domain: {enabled: true}}
aliases:
  x/ucb1: {description: u, strategy: ucb1, candidates: {models: [m-a, m-b, m-c]}}
  x/ucb1-eps: {description: u, strategy: ucb1, exploration: 0.6, candidates: {models: [m-a, m-b, m-c]}}
  x/thompson: {description: t, strategy: thompson, candidates: {models: [m-a, m-b, m-c]}}
  x/contextual: {description: c, strategy: contextual, candidates: {models: [m-a, m-b, m-c]}}
  x/contextual-eps: {description: c, strategy: contextual, exploration: 0.6, candidates: {models: [m-a, m-b, m-c]}}
  x/cost: {description: c, strategy: cost, candidates: {models: [m-a, m-b, m-c]}}
  x/latency: {description: l, strategy: latency, exploration: 0.5, candidates: {models: [m-a, m-b, m-c]}}
  x/rules: {description: r, strategy: rules, candidates: {models: [m-a, m-b, m-c]}}
  x/lkgp: {description: k, strategy: lkgp, candidates: {models: [m-a, m-b, m-c]}}
  x/sla: {description: s, strategy: sla-aware, sla: {target_p95_ms: 900, hard_constraints: true},
          candidates: {models: [m-a, m-b, m-c]}}
  x/budget: {description: b, strategy: ucb1, budget: {max_cost_per_request_usd: 0.0000001, mode: strict},
             candidates: {models: [m-a, m-b, m-c]}}
"""
PROMPTS = ["Write a Python function that merges two sorted lists",
           "Translate this sentence into French: the weather is fine today",
           "hi"]


def _cand(id, *, cost=2.0, p95=2000.0, err=0.0, sd=0.0, breaker="CLOSED", tier=None, pulls=0.0, mean=0.0,
          latency=5.0, fit=0.5, signals=None):
    d = Deployment(id=id, model_name="g", model=f"{id}/{id}-model", provider=id.split("-")[0], tier=tier,
                   input_cost_per_1m=cost, output_cost_per_1m=cost)
    st = ArmStats(pulls=pulls, total_reward=pulls * mean, alpha=1.0 + pulls * mean, beta=1.0 + pulls * (1 - mean),
                  avg_latency=latency, count=int(pulls))
    return Candidate(d, st, breaker, p95, sd, err, fit, 1.0, signals or {})


def _pools() -> dict:
    learned = [_cand("p1-a", cost=5.0, p95=3000.0, err=0.1, sd=300.0, tier="pro", pulls=40, mean=0.6, latency=2.0),
               _cand("p2-b", cost=0.5, p95=800.0, sd=20.0, tier="free", pulls=55, mean=0.8, latency=0.7, fit=0.9),
               _cand("p3-c", cost=1.5, p95=1200.0, err=0.02, sd=90.0, tier="ultra", pulls=12, mean=0.7, latency=1.1,
                     signals={"context_affinity": 0.9})]
    fresh = [_cand("p1-a", cost=3.0), _cand("p2-b", cost=1.0, pulls=3, mean=0.5), _cand("p3-c", cost=2.0)]
    one_open = [learned[0], _cand("p2-b", cost=0.5, p95=800.0, breaker="OPEN", pulls=55, mean=0.8, latency=0.7),
                _cand("p3-c", cost=1.5, p95=1200.0, breaker="HALF_OPEN", pulls=12, mean=0.7, latency=1.1)]
    all_open = [_cand(c.id, cost=c.deployment.input_cost_per_1m, p95=c.p95_latency_ms, breaker="OPEN",
                      pulls=c.stats.pulls, mean=c.stats.mean_reward, latency=c.stats.avg_latency) for c in learned]
    ties = [_cand("t1-a", pulls=10, mean=0.5, latency=1.0), _cand("t2-b", pulls=10, mean=0.5, latency=1.0)]
    single = [learned[1]]
    return {"learned": learned, "fresh": fresh, "one_open": one_open, "all_open": all_open, "ties": ties,
            "single": single}


def _rendered(decision) -> dict:
    out = decision.as_dict()
    out["ranking"] = decision.ranking()
    out["probe"] = decision.probe
    return out


def direct_cases() -> list:
    """Each built-in strategy (but contextual) called directly on pools of ready-made Candidates."""
    out = []
    for name in STRATEGIES:
        for pool_name, pool in _pools().items():
            for eps in (0.0, 0.5):
                for seed in (1, 2):
                    kw = {}
                    if name == "lkgp":  # a deployment, a provider, none
                        kw["last_known_good"] = ("p2-b", "p3", None)[(seed + int(eps * 2)) % 3]
                    if name == "sla-aware":
                        kw["sla"] = Sla(target_p95_ms=1000.0, max_error_rate=0.05, max_cost_per_1m=2.0,
                                        hard_constraints=seed == 2)
                    ctx = context(pool, strategy=name, seed=seed, now=100.0, exploration=eps, **kw)
                    d = plugins.get_strategy(name).select(pool, ctx)
                    out.append({"case": f"{name}/{pool_name}/eps {eps}/seed {seed}", **_rendered(d)})
    return out


def engine_cases(tmp: Path) -> list:
    """Decisions of an engine over a memory store that has learned, per alias of POLICY (every
    strategy, contextual included), and as the proxy's explain log renders them."""
    from aisia_plugin.engine import Engine
    from aisia_plugin.litellm.runtime import Call, Runtime
    from aisia_plugin.outcome import Outcome
    from aisia_plugin.policy.loader import load_policy_with_locations
    from aisia_plugin.state.memory import MemoryState

    (tmp / "policy.yaml").write_text(POLICY)
    loaded = load_policy_with_locations([tmp / "policy.yaml"])
    deps = [Deployment(id="m-a", model_name="m-a", model="openai/gpt-4o", provider="openai", tier="pro",
                       input_cost_per_1m=2.5, output_cost_per_1m=10.0),
            Deployment(id="m-b", model_name="m-b", model="anthropic/claude-3-haiku", provider="anthropic",
                       tier="standard", input_cost_per_1m=0.25, output_cost_per_1m=1.25),
            Deployment(id="m-c", model_name="m-c", model="ollama/llama3", provider="ollama", tier="free",
                       local=True, input_cost_per_1m=0.0, output_cost_per_1m=0.0)]
    clock = [1000.0]
    store = MemoryState()
    engine = Engine(loaded.policy, clock=lambda: clock[0], rng=random.Random(5), store=store)
    rt = Runtime(loaded, store=store)
    rt.engine = engine
    out = []
    for round_ in range(3):
        for alias in loaded.policy.aliases:
            for p, prompt in enumerate(PROMPTS):
                messages = [{"role": "user", "content": prompt}]
                feats = engine.features(messages)
                if round_ == 2:
                    feats = feats.replace(estimate_probability=True)
                exclude = ("m-a",) if p == 2 and round_ == 2 else ()
                d = engine.decide(alias, messages, deps, features=feats, exclude=exclude, reserve=False,
                                  session="s1")
                call = Call(alias, f"r{round_}-{alias}-{p}", None, 0.0)
                rt.explain_entry(call, d, len(exclude), list(exclude))
                if d.deployment_id is not None:
                    ok = (round_ + p) % 3 != 0
                    outcome = Outcome(deployment_id=d.deployment_id, success=ok, latency_s=0.3 + 0.2 * p,
                                      status_code=200 if ok else 500, input_tokens=10, output_tokens=20,
                                      cost_usd=0.0001)
                    engine.record(d, outcome, session="s1")
                clock[0] += 1.0
        rendered = rt.render_explain(10_000)
        for row in rendered:
            row.pop("time")
            out.append({"case": f"explain/round {round_}", **row})
        rt.explain.clear()
    return out


def all_cases(tmp: Path) -> list:
    return direct_cases() + engine_cases(tmp)


def _normal(cases) -> list:
    """As JSON has them (infinities written as Infinity; tuples as lists)."""
    return json.loads(json.dumps(cases))


def test_every_strategys_explanation_renders_as_before(tmp_path):
    want = json.loads(GOLDEN.read_text())["cases"]
    got = _normal(all_cases(tmp_path))
    assert [c["case"] for c in got] == [c["case"] for c in want]
    for g, w in zip(got, want):
        assert g == w, g["case"]


def test_the_reference_covers_every_strategy_exploration_and_exclusions():
    cases = json.loads(GOLDEN.read_text())["cases"]
    assert {c["strategy"] for c in cases} >= {*STRATEGIES, "contextual"}
    reasons = " ".join(c["reason"] for c in cases)
    assert "exploration (epsilon" in reasons and "instead of the ranking's" in reasons
    assert "which is also the ranking's choice" in reasons and "fell back to rules" in reasons
    rows = [r for c in cases for r in c["candidates"]]
    assert any("breaker OPEN" in (r.get("excluded") or "") for r in rows)
    assert any(r.get("terms", {}).get("moved_by") for r in rows)
    assert any(isinstance(r["score"], float) and math.isinf(r["score"]) for r in rows if r["score"] is not None)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import subprocess
    import tempfile

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        cases = _normal(all_cases(Path(tmp)))
    # One case per line: a difference shows as the case that changed.
    GOLDEN.write_text('{"commit": "%s", "cases": [\n%s\n]}\n' % (commit, ",\n".join(json.dumps(c) for c in cases)))
    print(f"{GOLDEN}: {len(cases)} cases from {commit}")
