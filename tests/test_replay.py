"""`aisia replay`: the trace and candidates formats, the scenario (costs, latency models, outages),
the baselines, the router run through the real Engine (online, failover, breaker on simulated
time), compare, sweep, plot, and the command line's exit codes and messages."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisia_plugin.cli import main
from aisia_plugin.policy import load_policy
from aisia_plugin.replay.candidates import CandidatesError, CandidateSpec, LatencyModel, Outage, load_candidates
from aisia_plugin.replay.runner import (ReplayError, build_scenario, call_cost, override_alias, parse_sweep, percentile,
                                        replay, run_oracle, sweep)
from aisia_plugin.replay.trace import RecordedOutcome, TraceError, load_trace, parse_record

FIX = Path(__file__).parent / "fixtures" / "replay"
SMALL = FIX / "small.jsonl"
CANDS = FIX / "candidates.yaml"


BASE_POLICY = """
    version: 1
    aliases:
      auto: {strategy: ucb1}
      auto/coding: {strategy: ucb1, domain_hint: coding, cost_weight: 0.05}
      auto/noretry: {strategy: ucb1, failover: {attempts: 0}}
      auto/thompson: {strategy: thompson}
      auto/openai: {strategy: ucb1, candidates: {providers: [openai]}}
      auto/strict: {strategy: ucb1, budget: {max_cost_per_request_usd: 0.000000001, mode: strict}}
    domains:
      definitions:
        coding: {patterns: ['\\bpython\\b', '\\bfunction\\b', '\\bcode\\b']}
    """


@pytest.fixture
def policy_path(write_file):
    return write_file(BASE_POLICY)


@pytest.fixture
def policy(policy_path):
    return load_policy([policy_path])


def write_trace(tmp_path, rows, name="trace.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def row(i, outcomes, content="hello there"):
    return {"id": f"r{i}", "messages": [{"role": "user", "content": content}], "outcomes": outcomes}


# -- the trace -----------------------------------------------------------------------------------
def test_trace_loads_in_file_order_with_candidates_in_order_of_appearance():
    t = load_trace(SMALL)
    assert len(t) == 30
    assert [r.id for r in t.records[:3]] == ["r00", "r01", "r02"]
    assert t.candidates == ["openai-gpt-4o", "groq-llama-3.1-8b", "deepseek-coder"]
    failed = t.records[3].outcomes["deepseek-coder"]
    assert failed.failed and failed.status_code == 500 and failed.score is None


def test_bad_trace_lists_every_problem_as_file_line_message():
    with pytest.raises(TraceError) as exc:
        load_trace(FIX / "bad.jsonl")
    text = str(exc.value)
    lines = text.splitlines()
    assert lines[0] == f"{FIX / 'bad.jsonl'}:2: outcomes.a.score: must be a number from 0 to 1, got 1.5"
    assert any(l.startswith(f"{FIX / 'bad.jsonl'}:3: invalid JSON") for l in lines)
    assert any(":5: duplicate id 'ok1' (first on line 1)" in l for l in lines)
    assert any(":6: messages:" in l for l in lines)
    assert any(":6: outcomes.a: needs a score" in l for l in lines)
    assert not any(":4:" in l for l in lines)  # a blank line is skipped


@pytest.mark.parametrize("obj, message", [
    ([1, 2], "each line must be a JSON object"),
    ({"messages": [{"role": "user", "content": "x"}]}, "outcomes: must be a non-empty object"),
    ({"messages": [{"role": "user", "content": "x"}], "outcomes": {"a": {"score": True}}}, "outcomes.a.score"),
    ({"messages": [{"role": "user", "content": "x"}], "outcomes": {"a": {"score": 0.5, "latency_ms": -1}}}, "latency_ms: must be a number >= 0"),
    ({"messages": [{"role": "user", "content": "x"}], "outcomes": {"a": {"score": 0.5, "input_tokens": 1.5}}}, "input_tokens: must be a whole number"),
    ({"messages": [{"role": "user", "content": "x"}], "outcomes": {"a": {"score": 0.5, "scroe": 1}}}, "unknown field(s) scroe"),
    ({"messages": [{"role": "user"}], "outcomes": {"a": {"error": 3}}}, "outcomes.a.error: must be a string"),
    ({"messages": "hi", "outcomes": {"a": {"score": 1}}}, "messages: must be a non-empty list"),
])
def test_bad_records_are_explained(obj, message):
    rec, problems = parse_record(obj, 0, 1)
    assert rec is None
    assert any(message in p for p in problems), problems


def test_empty_trace_and_bad_encoding_are_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TraceError, match=r"empty.jsonl:1: the trace holds no requests"):
        load_trace(empty)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "\xe9"}\n')
    with pytest.raises(TraceError, match=r"latin.jsonl:1: not UTF-8"):
        load_trace(latin)


# -- candidates -----------------------------------------------------------------------------------
def test_candidates_file_and_its_errors_with_lines():
    specs = load_candidates(CANDS)
    assert specs["openai-gpt-4o"].input_cost_per_1m == 2.5 and specs["openai-gpt-4o"].tier == "pro"
    assert specs["groq-llama-3.1-8b"].latency == LatencyModel("fixed", mean_ms=200.0)
    ds = specs["deepseek-coder"].latency
    assert ds.distribution == "lognormal" and ds.outages == (Outage(10, 14, 503),)
    with pytest.raises(CandidatesError) as exc:
        load_candidates(FIX / "bad_candidates.yaml")
    lines = str(exc.value).splitlines()
    bad = FIX / "bad_candidates.yaml"
    assert f"{bad}:3: candidates.a.tier: must be one of ultra, pro, standard, free" in lines
    assert any(l.startswith(f"{bad}:5: candidates.a.latency.distribution") for l in lines)
    assert any(l.startswith(f"{bad}:7: candidates.b.input_cost_per_1m") for l in lines)


def test_deployment_from_spec_else_policy_costs(policy):
    d = CandidateSpec(input_cost_per_1m=2.5, output_cost_per_1m=10.0, tier="pro").to_deployment("openai-gpt-4o", policy)
    assert (d.id, d.model_name, d.model, d.provider, d.tier) == ("openai-gpt-4o", "openai-gpt-4o", "openai-gpt-4o", "openai", "pro")
    assert (d.input_cost_per_1m, d.output_cost_per_1m) == (2.5, 10.0)
    plain = CandidateSpec().to_deployment("groq-llama-3.1-8b", policy)
    assert plain.provider == "groq"
    table = policy.costs.by_provider_prefix
    expected = table.get("groq", policy.costs.default_per_1m)
    assert (plain.input_cost_per_1m, plain.output_cost_per_1m) == (expected, expected)
    assert CandidateSpec(provider="acme", specialities={"coding": None}).to_deployment("x-1", policy).specialities == {"coding": None}


def test_call_cost_prefers_cost_usd_then_tokens_then_prompt_estimate(policy):
    dep = CandidateSpec(input_cost_per_1m=2.0, output_cost_per_1m=10.0).to_deployment("a", policy)
    msgs = [{"role": "user", "content": "x" * 400}]  # 100 estimated input tokens
    assert call_cost(RecordedOutcome(score=1, cost_usd=0.5, input_tokens=10), msgs, dep, True) == 0.5
    assert call_cost(RecordedOutcome(score=1, input_tokens=1000, output_tokens=100), msgs, dep, True) == pytest.approx((2000 + 1000) / 1e6)
    assert call_cost(RecordedOutcome(score=1, output_tokens=100), msgs, dep, True) == pytest.approx((200 + 1000) / 1e6)
    assert call_cost(RecordedOutcome(score=1), msgs, dep, True) == pytest.approx(200 / 1e6)
    assert call_cost(RecordedOutcome(error="boom"), msgs, dep, False) == 0.0


# -- the scenario ----------------------------------------------------------------------------------
def test_latency_models_are_seeded_drift_and_outages_apply(policy, tmp_path):
    trace = load_trace(SMALL)
    specs = load_candidates(CANDS)
    s1 = build_scenario(trace, specs, policy, seed=5)
    s2 = build_scenario(trace, specs, policy, seed=5)
    s3 = build_scenario(trace, specs, policy, seed=6)
    lat = lambda s: [row["deepseek-coder"].latency_ms for row in s.calls]
    assert lat(s1) == lat(s2) and lat(s1) != lat(s3)
    assert all(row["groq-llama-3.1-8b"].latency_ms == row["groq-llama-3.1-8b"].latency_ms for row in s1.calls)
    assert s1.calls[0]["openai-gpt-4o"].latency_ms == trace.records[0].outcomes["openai-gpt-4o"].latency_ms  # recorded wins
    for i in range(10, 14):  # the outage window
        c = s1.calls[i]["deepseek-coder"]
        assert not c.success and c.status_code == 503 and c.cost_usd == 0.0
    assert s1.calls[14]["deepseek-coder"].success
    no_model = build_scenario(trace, {}, policy)
    assert no_model.calls[0]["deepseek-coder"].latency_ms is None
    drift = LatencyModel("fixed", mean_ms=100.0, drift_ms_per_request=2.0)
    import random
    assert drift.sample(10, random.Random(0)) == 120.0
    uni = LatencyModel("uniform", min_ms=50.0, max_ms=60.0)
    assert all(50.0 <= uni.sample(0, random.Random(k)) <= 60.0 for k in range(20))


def test_percentile_interpolates_and_ignores_nothing():
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)


def test_oracle_takes_best_score_and_cheapest_among_ties(policy, tmp_path):
    p = write_trace(tmp_path, [
        row(0, {"a": {"score": 0.9, "cost_usd": 0.02}, "b": {"score": 0.9, "cost_usd": 0.01}, "c": {"score": 0.5, "cost_usd": 0.0}}),
        row(1, {"a": {"error": "down"}, "b": {"score": 0.2, "cost_usd": 0.01}}),
        row(2, {"a": {"error": "down"}, "b": {"error": "down"}}),
    ])
    sc = build_scenario(load_trace(p), {}, policy)
    served = run_oracle(sc, ["a", "b", "c"])
    assert [s.served_by for s in served] == ["b", "b", None]
    assert [s.score for s in served] == [0.9, 0.2, 0.0]
    assert served[2].error


# -- the router through the Engine -------------------------------------------------------------------
def test_replay_reports_router_and_baselines(policy):
    sc = build_scenario(load_trace(SMALL), load_candidates(CANDS), policy, seed=1)
    res = replay(policy, "auto/coding", sc, seed=1)
    r = res.router
    assert res.requests == r.requests == 30
    assert sum(r.calls.values()) == 30 + r.failovers
    assert 0.0 <= r.mean_score <= 1.0 and r.total_cost_usd > 0
    assert r.p50_latency_ms is not None and r.p95_latency_ms >= r.p50_latency_ms
    b = res.baselines
    assert set(b.fixed) == {"openai-gpt-4o", "groq-llama-3.1-8b", "deepseek-coder"}
    assert b.oracle.regret == 0.0
    for f in [r, b.uniform, *b.fixed.values()]:
        assert f.regret >= -1e-12
        assert f.mean_score <= b.oracle.mean_score + 1e-12
    # fixed deepseek: its recorded failures and the outage window are errors seen by clients
    assert b.fixed["deepseek-coder"].errors == len([i for i in range(30) if i % 7 == 3 or 10 <= i < 14])
    # same seed, same figures
    again = replay(policy, "auto/coding", build_scenario(load_trace(SMALL), load_candidates(CANDS), policy, seed=1), seed=1)
    assert again.as_dict() == res.as_dict()


def test_only_the_chosen_outcome_is_revealed(policy, tmp_path, monkeypatch):
    from aisia_plugin.engine import Engine

    seen = []
    orig = Engine.record

    def spy(self, decision, outcome, **kw):
        seen.append((decision.deployment_id, outcome.deployment_id, outcome.quality))
        return orig(self, decision, outcome, **kw)

    monkeypatch.setattr(Engine, "record", spy)
    sc = build_scenario(load_trace(SMALL), {}, policy)
    res = replay(policy, "auto", sc)
    assert len(seen) == sum(res.router.calls.values())
    assert all(d == o for d, o, _ in seen)
    first = sc.trace.records[0].outcomes[seen[0][0]]
    assert seen[0][2] == first.score  # the replay score reaches the learner as quality


def test_failover_follows_alias_attempts(policy, tmp_path):
    rows = [row(i, {"a-bad": {"error": "upstream 500", "status_code": 500}, "b-good": {"score": 0.7, "cost_usd": 0.001}})
            for i in range(5)]
    sc = build_scenario(load_trace(write_trace(tmp_path, rows)), {}, policy)
    with_failover = replay(policy, "auto", sc).router
    assert with_failover.errors == 0
    assert with_failover.failovers >= 1
    assert with_failover.mean_score == pytest.approx(0.7)
    no_retry = replay(policy, "auto/noretry", sc).router
    assert no_retry.failovers == 0
    assert no_retry.errors >= 1
    assert no_retry.errors + no_retry.calls.get("b-good", 0) == 5


def test_breaker_opens_on_simulated_time(policy, tmp_path):
    # b fails for 20 requests: after failure_threshold failures its circuit opens and the router
    # stops calling it; 60 simulated seconds later (timeout_s) it may be probed again.
    rows = []
    for i in range(200):
        b = {"error": "down", "status_code": 503} if 5 <= i < 25 else {"score": 0.95, "cost_usd": 0.001}
        rows.append(row(i, {"a-ok": {"score": 0.5, "cost_usd": 0.001}, "b-flaky": b}))
    sc = build_scenario(load_trace(write_trace(tmp_path, rows)), {}, policy)
    res = replay(policy, "auto/noretry", sc)
    thr = policy.circuit_breaker.failure_threshold
    # calls to b during the outage stay bounded by the breaker's threshold (plus half-open probes)
    assert res.router.errors <= thr + 2 * policy.circuit_breaker.half_open_max_calls + 1
    assert res.router.calls.get("b-flaky", 0) > 100  # and the router comes back to the better one


def test_alias_selecting_no_trace_candidate_is_a_replay_error(policy, tmp_path):
    sc = build_scenario(load_trace(write_trace(tmp_path, [row(0, {"groq-x": {"score": 1}})])), {}, policy)
    with pytest.raises(ReplayError, match="selects none"):
        replay(policy, "auto/openai", sc)


def test_strict_budget_refusals_are_client_errors_without_calls(policy, tmp_path):
    sc = build_scenario(load_trace(write_trace(tmp_path, [row(i, {"a-1": {"score": 1}}, "x" * 4000) for i in range(3)])), {}, policy)
    r = replay(policy, "auto/strict", sc).router
    assert r.errors == 3 and r.calls == {} and r.mean_score == 0.0 and r.total_cost_usd == 0.0


def test_a_candidate_missing_from_a_request_is_not_offered(policy, tmp_path):
    rows = [row(0, {"a-1": {"score": 0.5}, "b-1": {"score": 0.9}}), row(1, {"a-1": {"score": 0.5}}), row(2, {"a-1": {"score": 0.5}})]
    sc = build_scenario(load_trace(write_trace(tmp_path, rows)), {}, policy)
    res = replay(policy, "auto", sc)
    assert res.router.calls.get("b-1", 0) <= 1 and res.router.errors == 0
    fixed_b = res.baselines.fixed["b-1"]
    assert fixed_b.missing == 2 and fixed_b.errors == 2
    assert res.baselines.as_dict()["fixed"]["b-1"]["missing"] == 2


def test_progress_bar_draws_to_its_stream():
    import io

    from aisia_plugin.replay.report import ProgressBar, progress_factory

    buf = io.StringIO()
    bar = ProgressBar("replay", buf, width=10, min_interval_s=0)
    for i in range(1, 5):
        bar(i, 4)
    text = buf.getvalue()
    assert "\rreplay [##########] 4/4 100.0%\n" in text and "1/4" in text
    assert progress_factory(False)("x") is None


# -- overrides and sweeps ---------------------------------------------------------------------------
def test_override_alias_copies_without_touching_the_original(policy):
    new = override_alias(policy, "auto/coding", "cost_weight", 0.5)
    assert new.aliases["auto/coding"].cost_weight == 0.5
    assert policy.aliases["auto/coding"].cost_weight == 0.05
    assert new.aliases["auto"] is policy.aliases["auto"]
    nested = override_alias(policy, "auto", "failover.attempts", 0)
    assert nested.aliases["auto"].failover.attempts == 0 and policy.aliases["auto"].failover.attempts == 2
    assert override_alias(policy, "auto", "exploration", 0.2).aliases["auto"].exploration == 0.2
    assert override_alias(policy, "auto", "exploration_c", 3).aliases["auto"].exploration_c == 3
    assert override_alias(policy, "auto", "latency_weight", 0.3).aliases["auto"].latency_weight == 0.3
    with pytest.raises(ReplayError):
        override_alias(policy, "auto", "exploration", 2)
    with pytest.raises(ReplayError):
        override_alias(policy, "auto", "strategy", 1)


def test_parse_sweep():
    assert parse_sweep("cost_weight=0, 0.05,0.1") == ("cost_weight", [0.0, 0.05, 0.1])
    for bad in ("cost_weight", "colour=1,2", "cost_weight=", "cost_weight=a,b"):
        with pytest.raises(ReplayError):
            parse_sweep(bad)


def test_sweep_runs_one_router_per_value(policy):
    sc = build_scenario(load_trace(SMALL), load_candidates(CANDS), policy)
    res = sweep(policy, "auto/coding", sc, "cost_weight", [0.0, 0.5, 5.0])
    assert [p.value for p in res.points] == [0.0, 0.5, 5.0]
    assert all(p.figures.requests == 30 for p in res.points)
    # a heavy cost weight never makes the router spend more than with none
    assert res.points[-1].figures.total_cost_usd <= res.points[0].figures.total_cost_usd + 1e-12


# -- invariants on random traces ----------------------------------------------------------------------
outcome_st = st.one_of(
    st.builds(lambda s, c: {"score": s, "cost_usd": c}, st.floats(0, 1), st.floats(0, 0.01)),
    st.just({"error": "down", "status_code": 503}),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a-1", "b-1", "c-1"]), outcome_st, min_size=1), min_size=1, max_size=25),
       st.integers(0, 3))
def test_invariants_on_random_traces(tmp_path_factory, rows, seed):
    tmp = tmp_path_factory.mktemp("h")
    (tmp / "policy.yaml").write_text(textwrap.dedent(BASE_POLICY))
    pol = load_policy([tmp / "policy.yaml"])
    sc = build_scenario(load_trace(write_trace(tmp, [row(i, o) for i, o in enumerate(rows)])), {}, pol, seed=seed)
    res = replay(pol, "auto", sc, seed=seed)
    o = res.baselines.oracle
    for f in [res.router, res.baselines.uniform, *res.baselines.fixed.values()]:
        assert f.mean_score <= o.mean_score + 1e-9
        assert f.regret >= -1e-9
        assert f.errors >= o.errors
    # no budget here: every request makes at least one call
    assert sum(res.router.calls.values()) == len(rows) + res.router.failovers
    json.dumps(res.as_dict())


# -- the command line ----------------------------------------------------------------------------------
def test_cli_text_table(aisia, policy_path):
    code, out, err = aisia("replay", "--policy", policy_path, "--alias", "auto/coding", "--data", SMALL, "--deployments", CANDS)
    assert code == 0, err
    for word in ("router", "oracle", "uniform random", "fixed openai-gpt-4o", "mean score", "total cost $", "p95 ms",
                 "errors", "regret", "calls per candidate"):
        assert word in out
    assert "Traceback" not in err and err == ""  # no progress bar: stderr is not a terminal


def test_cli_json(aisia, policy_path):
    code, out, _ = aisia("replay", "--policy", policy_path, "--alias", "auto/coding", "--data", SMALL, "--seed", 3, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["requests"] == 30 and data["seed"] == 3 and data["alias"] == "auto/coding"
    r = data["router"]
    for k in ("mean_score", "total_cost_usd", "p50_latency_ms", "p95_latency_ms", "errors", "calls", "regret"):
        assert k in r
    assert set(data["baselines"]) == {"candidates", "fixed", "uniform_random", "oracle"}
    assert data["baselines"]["oracle"]["regret"] == 0.0


def test_cli_progress_on_request(aisia, policy_path):
    code, _, err = aisia("replay", "--policy", policy_path, "--data", SMALL, "--progress", "--json")
    assert code == 0
    assert "30/30" in err and "100.0%" in err


def test_cli_compare(aisia, write_file, tmp_path, policy_path):
    other = write_file(BASE_POLICY.replace("cost_weight: 0.05", "cost_weight: 2.0"), "other.yaml")
    code, out, err = aisia("replay", "--policy", policy_path, "--compare", other, "--alias", "auto/coding",
                         "--data", SMALL, "--deployments", CANDS)
    assert code == 0, err
    assert "base" in out and "other" in out and "delta" in out and "mean score" in out
    code, out, _ = aisia("replay", "--policy", policy_path, "--compare", other, "--alias", "auto/coding",
                       "--data", SMALL, "--deployments", CANDS, "--json")
    data = json.loads(out)
    a, b, d = data["base"]["router"], data["other"]["router"], data["delta"]
    assert d["mean_score"] == pytest.approx(b["mean_score"] - a["mean_score"])
    assert d["total_cost_usd"] == pytest.approx(b["total_cost_usd"] - a["total_cost_usd"])
    # the same policy on both sides: no difference
    code, out, _ = aisia("replay", "--policy", policy_path, "--compare", policy_path, "--data", SMALL, "--json")
    assert all(v == 0 for k, v in json.loads(out)["delta"].items() if k != "calls")


def test_cli_sweep_and_plot(aisia, tmp_path, policy_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "curve.png"
    code, out, err = aisia("replay", "--policy", policy_path, "--alias", "auto/coding", "--data", SMALL,
                         "--deployments", CANDS, "--sweep", "cost_weight=0,0.05,0.5", "--plot", png)
    assert code == 0, err
    assert "cost_weight=0 " in out and "cost_weight=0.5" in out and "oracle" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, _ = aisia("replay", "--policy", policy_path, "--data", SMALL, "--sweep", "exploration_c=0.5,2", "--json")
    assert [p["value"] for p in json.loads(out)["points"]] == [0.5, 2.0]


def test_cli_policy_error_prints_locations_exit_1(aisia, write_file, tmp_path):
    bad = write_file("version: 1\naliases:\n  auto: {strategy: nope}\n", "bad.yaml")
    code, out, err = aisia("replay", "--policy", bad, "--data", SMALL)
    assert code == 1
    assert f"{bad}:3:" in err and "Traceback" not in err


def test_cli_bad_trace_exit_1(aisia, policy_path):
    code, _, err = aisia("replay", "--policy", policy_path, "--data", FIX / "bad.jsonl")
    assert code == 1
    assert err.splitlines()[0].startswith(f"{FIX / 'bad.jsonl'}:2: ")


def test_cli_bad_candidates_exit_1(aisia, policy_path):
    code, _, err = aisia("replay", "--policy", policy_path, "--data", SMALL, "--deployments", FIX / "bad_candidates.yaml")
    assert code == 1 and ":3: candidates.a.tier" in err


@pytest.mark.parametrize("extra, message", [
    (["--alias", "auto/nope"], "unknown alias"),
    (["--plot", "x.png"], "--plot needs --sweep"),
    (["--sweep", "colour=1"], "cannot sweep"),
    (["--sweep", "exploration=0,3"], "between 0 and 1"),
    (["--seconds-per-request", "0"], "seconds-per-request"),
    (["--sweep", "cost_weight=1", "--compare", "x"], "not allowed"),
    (["--data-typo"], ""),
])
def test_cli_usage_errors_exit_2(aisia, policy_path, extra, message):
    code, _, err = aisia("replay", "--policy", policy_path, "--data", SMALL, *extra)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_cli_missing_trace_exit_2(aisia, policy_path, tmp_path):
    code, _, err = aisia("replay", "--policy", policy_path, "--data", tmp_path / "nope.jsonl")
    assert code == 2 and "cannot read the trace" in err


def test_candidates_the_trace_does_not_have_or_unknown_domains_are_errors(tmp_path, capsys):
    """Issue 11, finding 9: a typo in a --deployments name used to be ignored silently (and
    changed the cost figures); an unknown speciality domain was accepted."""
    from aisia_plugin.cli import main

    fix = Path(__file__).parent / "fixtures" / "replay"
    cands = tmp_path / "cands.yaml"
    cands.write_text("candidates:\n  openai-gpt4o:\n    input_cost_per_1m: 100\n", encoding="utf-8")
    assert main(["replay", "--data", str(fix / "small.jsonl"), "--deployments", str(cands)]) == 1
    err = capsys.readouterr().err
    assert err == f"{cands}:2: candidates.openai-gpt4o: not a candidate of the trace; did you mean 'openai-gpt-4o'?\n"
    cands.write_text("candidates:\n  deepseek-coder:\n    specialities: {codng: null}\n", encoding="utf-8")
    assert main(["replay", "--data", str(fix / "small.jsonl"), "--deployments", str(cands)]) == 1
    err = capsys.readouterr().err
    assert err == (f"{cands}:3: candidates.deepseek-coder.specialities.codng: unknown domain 'codng'; "
                   "did you mean 'coding'?\n")
    cands.write_text("candidates:\n  deepseek-coder:\n    specialities: {coding: null}\n", encoding="utf-8")
    assert main(["replay", "--data", str(fix / "small.jsonl"), "--deployments", str(cands), "--json"]) == 0


def test_full_feedback_teaches_every_candidate_each_outcome_once(policy, tmp_path, monkeypatch):
    """The diagnosis `run_router(full_feedback=True)`: per request, the contextual model learns
    the chosen candidate's outcome (the engine) and every other candidate's (``teach_others``),
    each once, with its own recorded score and its own base; without it, the chosen one alone."""
    from aisia_plugin.contextual import ContextualModels
    from aisia_plugin.replay.runner import run_router, with_strategy

    rows = [row(i, {"a-1": {"score": 1}, "b-1": {"score": 0}}, f"prompt number {i}") for i in range(6)]
    sc = build_scenario(load_trace(write_trace(tmp_path, rows)), {}, policy)
    ctx_policy = with_strategy(policy, "auto/noretry", "contextual")
    learned = []
    orig = ContextualModels.learn

    def spy(self, dep, ctx, reward, tick, gamma):
        learned.append((dep, reward, ctx.base))
        return orig(self, dep, ctx, reward, tick, gamma)

    monkeypatch.setattr(ContextualModels, "learn", spy)
    run_router(ctx_policy, "auto/noretry", sc, seed=3)
    assert len(learned) == 6  # the chosen candidate only
    learned.clear()
    run_router(ctx_policy, "auto/noretry", sc, seed=3, full_feedback=True)
    assert len(learned) == 12
    for i in range(6):
        pair = learned[2 * i:2 * i + 2]
        assert sorted(d for d, _, _ in pair) == ["a-1", "b-1"]
        assert all(r == (1.0 if d == "a-1" else 0.0) for d, r, _ in pair)
        assert all(0.0 <= b <= 1.0 for _, _, b in pair)


def test_full_feedback_teaches_no_failure_the_provider_did_not_cause(policy, tmp_path, monkeypatch):
    """A candidate's rate limit (429) teaches its model nothing in the diagnosis either, as the
    engine learns nothing from it (Engine.judge); its server error (500) does."""
    from aisia_plugin.contextual import ContextualModels
    from aisia_plugin.replay.runner import run_router, with_strategy

    rows = [row(i, {"a-1": {"score": 1}, "b-1": {"error": "busy", "status_code": 429 if i % 2 else 500}},
                f"prompt number {i}") for i in range(8)]
    sc = build_scenario(load_trace(write_trace(tmp_path, rows)), {}, policy)
    learned = []
    orig = ContextualModels.learn

    def spy(self, dep, ctx, reward, tick, gamma):
        learned.append((dep, reward))
        return orig(self, dep, ctx, reward, tick, gamma)

    monkeypatch.setattr(ContextualModels, "learn", spy)
    ctx_policy = with_strategy(policy, "auto/noretry", "contextual")
    # No draw (exploration 0): b-1 is never chosen, so that its breaker never opens and every row
    # teaches it (with draws, the quality estimates' posteriors would explore it now and then).
    ap = ctx_policy.aliases["auto/noretry"]
    ap = ap.model_copy(update={"contextual": ap.contextual.model_copy(update={"exploration": 0.0})})
    ctx_policy = ctx_policy.model_copy(update={"aliases": {**ctx_policy.aliases, "auto/noretry": ap}})
    served = run_router(ctx_policy, "auto/noretry", sc, seed=3, full_feedback=True)
    assert len(served) == 8
    # b-1 learns its four 500s (chosen or taught), never a 429; a-1 all eight outcomes.
    assert [r for d, r in learned if d == "b-1"] == [0.0] * 4
    assert len([d for d, _ in learned if d == "a-1"]) == 8
