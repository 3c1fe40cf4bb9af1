"""Quality with its cost (replay/quality.py): the mixing frontier, gain over mixing, PGR, CPT and
APGR, checked on hand-computed figures, then through a tiny replayed trace and the command line."""

from __future__ import annotations

import json
import textwrap

import pytest

from aisia_plugin.cli import main
from aisia_plugin.policy import load_policy
from aisia_plugin.replay.quality import (Point, apgr, cpt, frontier_score, gain_over_mixing, measures, mixing_frontier,
                                         pgr, pgr_curve, strong_share, weak_and_strong)
from aisia_plugin.replay import runner
from aisia_plugin.replay.runner import (Served, baselines, build_scenario, figures, first_requests, replay,
                                        served_from, sweep)
from aisia_plugin.replay.trace import load_trace


def test_frontier_drops_dominated_and_under_hull_points():
    pts = [Point(1.0, 0.5, "a"), Point(2.0, 0.55, "under"), Point(3.0, 0.9, "b"), Point(4.0, 0.8, "dominated"),
           Point(1.0, 0.4, "same cost worse"), Point(5.0, 0.9, "as good but dearer")]
    f = mixing_frontier(pts)
    assert [p.name for p in f] == ["a", "b"]
    # linear between the vertices, flat outside
    assert frontier_score(f, 2.0) == pytest.approx(0.7)
    assert frontier_score(f, 0.5) == 0.5
    assert frontier_score(f, 10.0) == 0.9
    assert gain_over_mixing(0.75, 2.0, f) == pytest.approx(0.05)
    # a point above the chord stays a vertex
    f2 = mixing_frontier(pts + [Point(2.0, 0.8, "above")])
    assert [p.name for p in f2] == ["a", "above", "b"]
    assert frontier_score(f2, 2.5) == pytest.approx(0.85)


def test_mixing_itself_gains_nothing():
    f = mixing_frontier([Point(0.004, 0.5), Point(0.04, 0.75)])
    # a 30/70 mixture of the two candidates lies on the frontier
    cost, score = 0.3 * 0.004 + 0.7 * 0.04, 0.3 * 0.5 + 0.7 * 0.75
    assert gain_over_mixing(score, cost, f) == pytest.approx(0.0, abs=1e-12)


def test_pgr_cpt_apgr_by_hand():
    assert pgr(0.7, 0.5, 0.75) == pytest.approx(0.8)
    curve = pgr_curve([(0.5, 0.9)])
    assert curve == [(0.0, 0.0), (0.5, 0.9), (1.0, 1.0)]
    assert cpt(curve, 0.5) == pytest.approx(0.5 * 0.5 / 0.9)
    assert cpt(curve, 0.8) == pytest.approx(0.8 * 0.5 / 0.9)
    assert cpt(curve, 0.95) == pytest.approx(0.75)
    assert apgr(curve) == pytest.approx(0.5 * 0.9 / 2 + 0.5 * 1.9 / 2)  # 0.7
    # random mixing: the diagonal, CPT(x) = x, APGR 0.5
    diag = pgr_curve([(0.3, 0.3)])
    assert cpt(diag, 0.8) == pytest.approx(0.8) and apgr(diag) == pytest.approx(0.5)
    # a curve that jumps past x at its first point
    assert cpt(pgr_curve([(0.2, 1.1)]), 0.95) == pytest.approx(0.2 * 0.95 / 1.1)
    assert strong_share({"w": 3, "s": 1}, "s") == 0.25 and strong_share({}, "s") == 0.0


def test_weak_and_strong():
    assert weak_and_strong({"w": Point(1, 0.5), "s": Point(9, 0.7)}) == ("w", "s")
    assert weak_and_strong({"s": Point(9, 0.7), "w": Point(1, 0.5)}) == ("w", "s")
    assert weak_and_strong({"a": Point(1, 0.5), "b": Point(2, 0.5)}) is None
    assert weak_and_strong({"a": Point(1, 0.5)}) is None


# -- a tiny trace, every figure by hand ----------------------------------------------------------
#  request  w (score, $)   s (score, $)   oracle
#  r1       1, 0.001       1, 0.010       w (tie: cheaper)
#  r2       0, 0.001       1, 0.010       s
#  r3       0, 0.001       1, 0.010       s
#  r4       1, 0.001       0, 0.010       w
# fixed w: score 0.5 at $0.004; fixed s: 0.75 at $0.04; oracle: 1.0 at $0.022 (2 of 4 calls to s).
# Frontier at $0.022: 0.5 + 0.25 * 0.018 / 0.036 = 0.625, so the oracle gains +0.375, PGR 2.
TINY = [(1, 1), (0, 1), (0, 1), (1, 0)]

POLICY = """
    version: 1
    aliases:
      auto: {strategy: ucb1, failover: {attempts: 0}}
    """


@pytest.fixture
def tiny(tmp_path):
    rows = [{"id": f"r{i + 1}", "messages": [{"role": "user", "content": f"question {i}"}],
             "outcomes": {"w": {"score": w, "cost_usd": 0.001}, "s": {"score": s, "cost_usd": 0.01}}}
            for i, (w, s) in enumerate(TINY)]
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pol = tmp_path / "policy.yaml"
    pol.write_text(textwrap.dedent(POLICY))
    return path, pol


def test_measures_on_the_tiny_trace(tiny):
    path, pol = tiny
    policy = load_policy([pol])
    scenario = build_scenario(load_trace(str(path)), {}, policy)
    base = baselines(policy, "auto", scenario)
    # a hand-made run: s on r2 only, w elsewhere
    row = scenario.calls
    served = [Served(row[0]["w"].score, 0.001, None, False, "w", ["w"]),
              Served(row[1]["s"].score, 0.01, None, False, "s", ["s"]),
              Served(row[2]["w"].score, 0.001, None, False, "w", ["w"]),
              Served(row[3]["w"].score, 0.001, None, False, "w", ["w"])]
    run = figures("hand", served)
    assert run.mean_score == 0.75 and run.total_cost_usd == pytest.approx(0.013)
    m = measures(base, [run])
    assert [p["name"] for p in m["frontier"]] == ["w", "s"]
    o = m["oracle"]
    assert o["mean_score"] == 1.0 and o["total_cost_usd"] == pytest.approx(0.022)
    assert o["mixing_score"] == pytest.approx(0.625)
    assert o["gain_over_mixing"] == pytest.approx(0.375)
    assert o["strong_share"] == 0.5 and o["pgr"] == pytest.approx(2.0)
    r = m["runs"][0]
    # at $0.013: 0.5 + 0.25 * 0.009 / 0.036 = 0.5625; gain 0.1875; share 1/4; PGR 1.0
    assert r["mixing_score"] == pytest.approx(0.5625)
    assert r["gain_over_mixing"] == pytest.approx(0.1875)
    assert r["strong_share"] == 0.25 and r["pgr"] == pytest.approx(1.0)
    assert m["oracle_share"] == pytest.approx(0.5)
    two = m["two_models"]
    assert (two["weak"], two["strong"]) == ("w", "s")
    # curve (0,0) (0.25,1.0) (1,1): CPT(x) = 0.25 x; APGR = 0.125 + 0.75 = 0.875
    assert two["cpt"] == {"50": pytest.approx(0.125), "80": pytest.approx(0.2), "95": pytest.approx(0.2375)}
    assert two["apgr"] == pytest.approx(0.875)


def test_a_router_that_always_takes_one_model_gains_nothing(tiny):
    path, pol = tiny
    policy = load_policy([pol])
    scenario = build_scenario(load_trace(str(path)), {}, policy)
    base = baselines(policy, "auto", scenario)
    m = measures(base, [base.fixed["s"], base.fixed["w"]])
    assert [r["gain_over_mixing"] for r in m["runs"]] == [pytest.approx(0.0), pytest.approx(0.0)]
    assert m["two_models"]["apgr"] == pytest.approx(0.5)


def test_replay_and_sweep_reports_carry_the_measures(tiny, capsys):
    path, pol = tiny
    code = main(["replay", "--policy", str(pol), "--data", str(path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    q = out["quality"]
    assert q["oracle"]["gain_over_mixing"] == pytest.approx(0.375)
    assert set(q["two_models"]["cpt"]) == {"50", "80", "95"}
    code = main(["replay", "--policy", str(pol), "--data", str(path)])
    text = capsys.readouterr().out
    assert code == 0 and "gain over mixing" in text and "CPT(95%)" in text and "APGR" in text
    code = main(["replay", "--policy", str(pol), "--data", str(path), "--sweep", "cost_weight=0,1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [r["name"] for r in out["quality"]["runs"]] == ["cost_weight=0", "cost_weight=1"]
    assert out["quality"]["best"] in ("cost_weight=0", "cost_weight=1")


def test_plot_draws_the_frontier(tiny, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path, pol = tiny
    png = tmp_path / "q.png"
    code = main(["replay", "--policy", str(pol), "--data", str(path), "--sweep", "cost_weight=0,1", "--plot", str(png)])
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "gain over mixing" in capsys.readouterr().out


def test_replay_result_and_sweep_objects(tiny):
    path, pol = tiny
    policy = load_policy([pol])
    scenario = build_scenario(load_trace(str(path)), {}, policy)
    res = replay(policy, "auto", scenario)
    m = measures(res.baselines, [res.router])
    assert m["runs"][0]["mean_score"] == res.router.mean_score
    sw = sweep(policy, "auto", scenario, "cost_weight", [0.0, 0.5])
    m2 = measures(sw.baselines, [p.figures for p in sw.points])
    assert len(m2["runs"]) == 2


def test_first_requests_are_measured_apart_on_their_own_frontier(tiny, monkeypatch, capsys):
    path, pol = tiny
    policy = load_policy([pol])
    scenario = build_scenario(load_trace(str(path)), {}, policy)
    head = baselines(policy, "auto", scenario.head(2))
    # The first two requests alone: fixed w 0.5 at $0.002, fixed s 1.0 at $0.02; the oracle takes
    # w on r1 and s on r2: 1.0 at $0.011, where mixing scores 0.5 + 0.5 * 0.009 / 0.018 = 0.75.
    assert head.fixed["w"].mean_score == 0.5 and head.fixed["s"].total_cost_usd == pytest.approx(0.02)
    row = scenario.calls
    like_oracle = [served_from([row[0]["w"]]), served_from([row[1]["s"]]), served_from([row[2]["w"]]),
                   served_from([row[3]["w"]])]
    always_w = [served_from([r["w"]]) for r in row]
    f = first_requests(head, {"like the oracle": like_oracle, "always w": always_w})
    assert f["requests"] == 2
    assert f["oracle_gain_over_mixing"] == pytest.approx(0.25)
    a, w = f["runs"]["like the oracle"], f["runs"]["always w"]
    assert a["mean_score"] == 1.0 and a["cost_per_request_usd"] == pytest.approx(0.0055)
    assert a["gain_over_mixing"] == pytest.approx(0.25)
    assert w["mean_score"] == 0.5 and w["gain_over_mixing"] == pytest.approx(0.0)
    # the whole trace, the same run: 0.75 (r3 scores 0) at $0.013, the hand run above
    assert figures("x", like_oracle).mean_score == 0.75
    # a replay carries its router's first requests (here the first 2 of 4), in its text and JSON
    monkeypatch.setattr(runner, "FIRST_REQUESTS", 2)
    res = replay(policy, "auto", scenario)
    assert res.first["requests"] == 2 and set(res.first["runs"]) == {"router"}
    # UCB1 tries w then s (pool order): the oracle's choices on r1 and r2
    assert res.first["runs"]["router"]["gain_over_mixing"] == pytest.approx(0.25)
    assert main(["replay", "--policy", str(pol), "--data", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["first"]["runs"]["router"]["mean_score"] == 1.0
    assert main(["replay", "--policy", str(pol), "--data", str(path)]) == 0
    assert "first 2 requests, router: mean score 1.0000" in capsys.readouterr().out
    # a trace no longer than FIRST_REQUESTS has no separate figures
    monkeypatch.setattr(runner, "FIRST_REQUESTS", 4)
    assert replay(policy, "auto", scenario).first is None


def test_the_best_candidate_per_label_in_hindsight_by_hand():
    from aisia_plugin.replay.runner import Call, Scenario, run_label_hindsight
    from aisia_plugin.replay.trace import Trace, TraceRecord

    # Label "a": x scores 1, 1 and y 0, 1 (x best); label "b": x 0, y 1 (y best). z ties x on "a"
    # at a higher cost, and fails on "b". A request without x's outcome is an error for its pick.
    table = [("a", {"x": (1.0, 0.1), "y": (0.0, 0.5), "z": (1.0, 0.3)}),
             ("b", {"x": (0.0, 0.1), "y": (1.0, 0.5), "z": (None, 0.0)}),
             ("a", {"x": (1.0, 0.1), "y": (1.0, 0.5), "z": (1.0, 0.3)}),
             ("a", {"y": (1.0, 0.5), "z": (1.0, 0.3)})]
    records = [TraceRecord(i, i + 1, f"r{i}", [], {}, label) for i, (label, _) in enumerate(table)]
    calls = [{n: Call(n, s is not None, s or 0.0, c, 100.0) for n, (s, c) in row.items()} for _, row in table]
    served = run_label_hindsight(Scenario(Trace("t", records), {}, calls), ["x", "y", "z"])
    # "a": x 2/3 (its missing request counts as nothing), z 3/3: z; "b": y.
    assert [s.served_by for s in served] == ["z", "y", "z", "z"]
    tied = run_label_hindsight(Scenario(Trace("t", records[:1]), {}, calls[:1]), ["z", "x"])  # x: as good, cheaper
    assert [s.served_by for s in tied] == ["x"]
    assert run_label_hindsight(Scenario(Trace("t", [TraceRecord(0, 1, "r", [], {})]), {}, [{}]), ["x"]) is None
