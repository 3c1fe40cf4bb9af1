"""The synthetic scenarios (`aisia replay --scenario`): seeded, valid, each event where it says;
and the command lines that use them and the held-out fit (`aisia train --holdout`)."""

from __future__ import annotations

import json

from aisia_plugin.cli import main as aisia
from aisia_plugin.replay import scenarios
from aisia_plugin.replay.trace import load_trace, write_records


def test_synthetic_deterministic_and_valid(tmp_path):
    a, meta_a = scenarios.generate("stationary", n=200, seed=3)
    b, meta_b = scenarios.generate("stationary", n=200, seed=3)
    c, _ = scenarios.generate("stationary", n=200, seed=4)
    assert a == b and meta_a == meta_b
    assert a != c
    names = set(meta_a["providers"])
    assert 8 <= len(names) <= 15
    for n, p in meta_a["providers"].items():
        assert p["provider"] == n.split("-", 1)[0]
        assert p["price_per_1m"] == scenarios.SEED_PRICES[p["provider"]]
    labels = {r["label"] for r in a}
    assert labels <= set(scenarios.DOMAINS) and len(labels) >= 3
    assert all(set(r["outcomes"]) == names for r in a)
    path = tmp_path / "s.jsonl"
    write_records(path, a)
    assert len(load_trace(str(path))) == 200


def test_degrade_really_degrades_the_named_provider():
    n = 2000
    recs, meta = scenarios.generate("degrade", n=n, seed=11)
    ev = meta["event"]
    x = ev["candidate"]
    assert x == scenarios.best_provider(scenarios.providers()).name
    assert ev["start"] == n // 2 and ev["end"] == 3 * n // 4

    def mean(lo, hi, cand):
        return sum(r["outcomes"][cand]["score"] for r in recs[lo:hi]) / (hi - lo)

    before, during, after = mean(0, ev["start"], x), mean(ev["start"], ev["end"], x), mean(ev["end"], n, x)
    assert during < 0.5 * before
    assert after > 0.8 * before
    # another provider is unchanged
    other = next(p for p in meta["providers"] if p != x)
    assert abs(mean(0, ev["start"], other) - mean(ev["start"], ev["end"], other)) < 0.1
    # the scenarios share the underlying draws: outside the event, degrade == stationary
    stat, _ = scenarios.generate("stationary", n=n, seed=11)
    assert recs[10]["outcomes"] == stat[10]["outcomes"]


def test_outage_errors_every_call_in_window():
    n = 1000
    recs, meta = scenarios.generate("outage", n=n, seed=5)
    ev = meta["event"]
    x = ev["candidate"]
    assert ev["end"] - ev["start"] == n // 10
    for r in recs[ev["start"]:ev["end"]]:
        assert "error" in r["outcomes"][x] and r["outcomes"][x]["status_code"] == 503
    assert not any("error" in o for r in recs[:ev["start"]] for o in r["outcomes"].values())


def test_prompt_aware_difficulty_shows_in_the_prompt_and_in_the_scores():
    records, meta = scenarios.generate_prompt_aware(n=1500, seed=3)
    assert meta["event"] is None and len(records) == 1500
    again, _ = scenarios.generate_prompt_aware(n=1500, seed=3)
    assert records == again
    weak, strong = "cerebras-llama-8b", "fireworks-llama-405b"
    signals = [r for r in records if "Constraints:" in r["messages"][0]["content"]]
    plain = [r for r in records if "Constraints:" not in r["messages"][0]["content"]]

    def mean(rows, cand):
        return sum(r["outcomes"][cand]["score"] for r in rows) / len(rows)

    # a structural signal of difficulty: the weak provider loses much more than the strong one
    assert mean(plain, weak) - mean(signals, weak) > 0.15
    assert mean(plain, strong) - mean(signals, strong) < 0.1
    # the signals also lengthen the prompt; the domain mix is the same on both sides
    assert (sum(len(r["messages"][0]["content"]) for r in signals) / len(signals)
            > 1.5 * sum(len(r["messages"][0]["content"]) for r in plain) / len(plain))


def test_replay_a_scenario_with_no_data_of_ones_own(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # auto/smart (quality first): the best provider is its choice before the outage, so the response
    # has something to move away from (auto's cost-aware choice shares it with cheaper ones).
    assert aisia(["replay", "--alias", "auto/smart", "--scenario", "outage", "--requests", "300", "--seed", "2",
                  "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["data"] == "scenario outage" and out["requests"] == 300
    assert set(out["baselines"]["fixed"]) == {p.name for p in scenarios.providers()}  # the default 11
    assert out["router"]["errors"] < out["baselines"]["fixed"]["fireworks-llama-405b"]["errors"] == 30  # failover
    # how the router's first choices answered the outage of the best provider (event_response)
    ev = out["event"]
    assert (ev["kind"], ev["start"], ev["end"]) == ("outage", 120, 150)
    assert ev["response"]["pre_share"] >= 0.2 and isinstance(ev["response"]["move_away"], int)
    assert ev["response"]["during_share"] < ev["response"]["pre_share"]
    assert list(tmp_path.iterdir()) == []  # nothing written unless asked


def test_replay_scenario_out_writes_the_trace_it_replayed(tmp_path, capsys):
    assert aisia(["replay", "--scenario", "price_change", "--requests", "200", "--providers", "8",
                  "--scenario-out", str(tmp_path), "--sweep", "cost_weight=0,1"]) == 0
    err = capsys.readouterr().err
    assert "event price on" in err and "written to" in err
    records, meta = scenarios.generate_scenario("price_change", n=200, n_providers=8, seed=0)
    assert [json.loads(line) for line in (tmp_path / "price_change.jsonl").read_text().splitlines()] == records
    assert json.loads((tmp_path / "price_change.meta.json").read_text()) == meta
    # the written files replay by hand as the scenario did
    assert aisia(["replay", "--data", str(tmp_path / "price_change.jsonl"),
                  "--deployments", str(tmp_path / "price_change.candidates.yaml")]) == 0


def test_replay_scenario_usage_errors(capsys):
    for argv, says in ((["--scenario", "nope"], "unknown scenario 'nope'"),
                       (["--scenario", "degrade", "--data", "t.jsonl"], "give one of"),
                       (["--requests", "10", "--data", "t.jsonl"], "--requests only apply with --scenario"),
                       (["--scenario", "degrade", "--providers", "20"], "--providers must be from 8 to 15"),
                       (["--scenario", "degrade", "--requests", "0"], "--requests must be from 1"),
                       (["--scenario", "degrade", "--deployments", "c.yaml"], "--deployments does not apply")):
        assert aisia(["replay", *argv]) == 2
        assert says in capsys.readouterr().err


def test_train_holdout_measures_the_model_on_requests_it_was_not_fitted_on(tmp_path, capsys):
    path = scenarios.write_scenario(tmp_path, "prompt_aware", *scenarios.generate_scenario("prompt_aware", n=200))
    cands = str(tmp_path / "prompt_aware.candidates.yaml")
    assert aisia(["train", "--data", str(path), "--deployments", cands, "--holdout", "0.25"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("held out: fitted on the first 150 requests, a greedy router on the other 50")
    rows = {line[:30].strip(): line[30:].split() for line in out[2:]}
    assert list(rows) == ["model (fit_full_information)", "ridge", "ridge, no hashing", "ridge, words in >= 2 prompts",
                          "shared + per-deployment", "ridge, rank 1", "difference to the cheapest", "logistic",
                          "logistic, no hashing", "logistic, online diagonal", "deployment mean", "domain mean",
                          "label mean"]
    # a context-free greedy router picks one fixed candidate per cost weight: no gain over mixing
    assert float(rows["deployment mean"][0]) <= 0.0
    assert len(list(tmp_path.iterdir())) == 3  # no model written without --out
    # The options on a short trace of the same scenario (a fit on 200 requests costs some 8 s of CPU).
    small = scenarios.write_scenario(tmp_path / "small", "prompt_aware", *scenarios.generate_scenario("prompt_aware", n=40))
    small_cands = str(tmp_path / "small" / "prompt_aware.candidates.yaml")
    assert aisia(["train", "--data", str(small), "--deployments", small_cands, "--holdout", "0.25", "--exact"]) == 0
    assert capsys.readouterr().out.splitlines()[2].startswith("model (fit_exact)")
    model = tmp_path / "m.json"
    assert aisia(["train", "--data", str(small), "--holdout", "0.25", "--out", str(model)]) == 0
    assert json.loads(model.read_text())["trained"]["requests"] == 30
    for bad in ("0", "1", "nan"):
        assert aisia(["train", "--data", str(small), "--holdout", bad]) == 2
        assert "--holdout must lie strictly between 0 and 1" in capsys.readouterr().err


def test_a_spend_target_sweep_reports_how_each_run_held_its_target(capsys, tmp_path):
    # The seed's UCB1 by name (as auto was until issue 40): the contextual default does not hold
    # this trace's target within 10 % yet (benchmarks/RESULTS.md, the spend target line).
    team = tmp_path / "ucb1.yaml"
    team.write_text("version: 1\naliases:\n  auto: {strategy: ucb1, exploration_c: 0.3}\n")
    assert aisia(["replay", "--scenario", "stationary", "--requests", "2500", "--json", "--policy", str(team),
                  "--sweep", "budget.target_usd_per_1k_requests=0.1,0.3"]) == 0
    points = json.loads(capsys.readouterr().out)["points"]
    for p in points:
        s = p["spend"]
        assert abs(s["spend_per_1k"] * 2500 / 1000 - p["total_cost_usd"]) < 1e-9  # the run's own spend
        assert s["whole_deviation"] == (s["spend_per_1k"] - p["value"]) / p["value"]
        above, below = s["windows"]["above"], s["windows"]["below"]
        assert 1000 <= above["start"] <= 1500 and below["spend_per_1k"] <= above["spend_per_1k"]
        assert abs(above["deviation"]) < 0.1 and abs(below["deviation"]) < 0.1  # pacing holds it
        assert 0.0 <= s["at_floor"] <= 1.0 and s["at_max"] == 0.0
    assert aisia(["replay", "--scenario", "stationary", "--requests", "300", "--sweep", "cost_weight=0,1"]) == 0
    assert "against the target" not in capsys.readouterr().out  # other sweeps follow no spend


def test_spend_figures_say_where_the_target_did_not_bind_inside_each_window():
    from aisia_plugin.replay.runner import spend_figures

    # 3,000 requests at a target of $1 per 1,000: the first 1,000 on target, then 1,000 at $2 per
    # 1,000 (the multiplier above 0), then 1,000 costing nothing with the multiplier at 0.
    costs = [0.001] * 1000 + [0.002] * 1000 + [0.0] * 1000
    multipliers = [1.0] * 2000 + [0.0] * 1000
    s = spend_figures(costs, multipliers, 1.0, 100.0)
    above, below = s["windows"]["above"], s["windows"]["below"]
    assert (above["start"], round(above["spend_per_1k"], 9), above["at_floor"]) == (1000, 2.0, 0.0)
    assert (below["start"], round(below["spend_per_1k"], 9), below["at_floor"]) == (2000, 0.0, 1.0)
    assert s["at_floor"] == 0.5  # of the 2,000 requests after the first 1,000
