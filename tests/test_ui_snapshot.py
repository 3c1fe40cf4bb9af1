"""The routing page's data: traffic shares per alias, breakers with time to half-open, learned
statistics; and the page itself is one self-contained file (no external resource)."""

from __future__ import annotations

import re

from aisia_plugin.breaker import BreakerState, CircuitBreaker
from aisia_plugin.decision import Deployment
from aisia_plugin.policy import load_policy
from aisia_plugin.ui import TrafficTimeline, page_html, snapshot

POLICY = load_policy()


def test_snapshot_shares_breakers_and_stats():
    deps = [Deployment("a-1", "gpt", "openai/gpt-4o", "openai", input_cost_per_1m=4.0, output_cost_per_1m=8.0),
            Deployment("b-2", "llama", "ollama/llama3", "ollama", local=True, input_cost_per_1m=0.0, output_cost_per_1m=0.0)]
    cb = CircuitBreaker(POLICY.circuit_breaker)
    breakers = {"b-2": BreakerState(state="OPEN", failures=5, last_failure_time=100.0)}
    recent = [{"alias": "auto", "deployment": "a-1", "reason": "r1"}, {"alias": "auto", "deployment": "a-1"},
              {"alias": "auto", "deployment": "b-2"}, {"alias": "auto/cheap", "deployment": None, "reason": "refused"}]
    stats = {"a-1": {"count": 3, "pulls": 3.0, "mean_reward": 0.9, "avg_latency": 0.2, "error_rate": 0.0,
                     "domains": {"coding": {"count": 2, "mean_reward": 0.95}}}}
    snap = snapshot(now=110.0, aliases=POLICY.aliases, deployments=deps, stats=stats, breakers=breakers,
                    breaker=cb, recent=recent)
    assert snap["aliases"]["auto"]["share"] == {"a-1": 2 / 3, "b-2": 1 / 3}
    assert snap["aliases"]["auto"]["decisions"] == 3 and snap["aliases"]["auto/cheap"]["share"] == {}
    a, b = snap["deployments"]
    assert a["breaker"] == "CLOSED" and a["to_half_open_s"] is None and a["count"] == 3
    assert a["domains"] == {"coding": {"count": 2, "mean_reward": 0.95}} and a["cost_per_1m"] == 0.75 * 4 + 0.25 * 8
    assert b["breaker"] == "OPEN" and b["to_half_open_s"] == cb.timeout_s - 10.0 and b["local"] is True
    assert b["count"] == 0 and b["avg_latency_s"] is None
    assert snap["recent"][0]["alias"] == "auto/cheap"  # newest first
    later = snapshot(now=100.0 + cb.timeout_s + 1, aliases={}, deployments=deps, stats={}, breakers=breakers,
                     breaker=cb, recent=[])
    assert later["deployments"][1]["breaker"] == "HALF_OPEN"


def test_snapshot_shows_quality_evidence_by_source_beside_health():
    deps = [Deployment("a-1", "gpt", "openai/gpt-4o", "openai"), Deployment("b-2", "llama", "ollama/llama3", "ollama")]
    quality = {"estimate": 0.7, "prior": 0.8, "evidence": {"prior": 10.0, "feedback": 1.0, "judge": 0.0, "signal": 12.0},
               "evidence_weight": 6.5}
    stats = {"a-1": {"count": 3, "error_rate": 0.0, "quality": quality}}
    snap = snapshot(now=0.0, aliases={}, deployments=deps, stats=stats, breakers={},
                    breaker=CircuitBreaker(POLICY.circuit_breaker), recent=[])
    a, b = snap["deployments"]
    assert a["quality"] == {"estimate": 0.7, "prior": 0.8, "evidence": {"signal": 12.0, "judge": 0.0, "feedback": 1.0}}
    assert a["breaker"] == "CLOSED" and a["error_rate"] == 0.0  # beside its health
    assert b["quality"] is None  # nothing learned: nothing claimed
    assert "qualityCell(d.quality)" in page_html() and "signals" in page_html()


def test_the_page_is_self_contained():
    html = page_html()
    assert "<script>" in html and "/data" in html
    # No CDN, no external script, style sheet, font or image.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html


def test_the_timeline_bins_each_aliass_decisions_over_equal_spans_of_time():
    t = TrafficTimeline(per_alias=8)
    for i in range(4):
        t.add("auto", "a-1", 100.0 + i)  # 100..103 on a-1
    t.add("auto", "a-1", 105.0)
    t.add("auto", "b-2", 105.0)
    t.add("auto", "b-2", 110.0)
    t.add("auto/cheap", "b-2", 50.0)
    tl = t.bins("auto", n=5)  # 100..110 in spans of 2 s
    assert (tl["start"], tl["end"], tl["span_s"], tl["decisions"]) == (100.0, 110.0, 2.0, 7)
    assert [b["end"] for b in tl["bins"]] == [102.0, 104.0, 106.0, 108.0, 110.0]
    assert [b["decisions"] for b in tl["bins"]] == [2, 2, 2, 0, 1]
    assert tl["bins"][2]["share"] == {"a-1": 0.5, "b-2": 0.5} and tl["bins"][3]["share"] == {}
    assert tl["bins"][4]["share"] == {"b-2": 1.0}  # the last decision falls in the last span
    one = t.bins("auto/cheap", n=5)
    assert one["decisions"] == 1 and [b["decisions"] for b in one["bins"]] == [1, 0, 0, 0, 0]
    assert t.bins("auto/fast") is None
    for i in range(10):  # bounded per alias: the oldest decisions leave
        t.add("auto", "c-3", 200.0 + i)
    assert t.bins("auto", n=2)["decisions"] == 8 and t.bins("auto", n=2)["start"] == 202.0
    snap = snapshot(now=0.0, aliases=POLICY.aliases, deployments=[], stats={}, breakers={},
                    breaker=CircuitBreaker(POLICY.circuit_breaker), recent=[], timeline=t)
    assert snap["aliases"]["auto"]["timeline"]["decisions"] == 8 and snap["aliases"]["auto/fast"]["timeline"] is None


def test_a_teams_snapshot_holds_its_own_figures_and_no_learning():
    from aisia_plugin.ui import TeamTimelines, team_snapshot

    timelines = TeamTimelines(teams=2, per_alias=10)
    for team, at in (("t-a", 1.0), ("t-b", 2.0), ("t-a", 3.0), ("t-c", 4.0)):
        timelines.add(team, "auto", "a-1", at)
    assert timelines.of("t-b") is None  # the team routed least recently was dropped
    assert timelines.of("t-a").bins("auto")["decisions"] == 2 and timelines.of("t-c") is not None
    recent = [{"ts": 1.0, "request_id": "r1", "alias": "auto", "deployment": "a-1", "domain": "coding",
               "strategy": "ucb1", "layer": "teams.t-a", "team": "t-a", "reason": "ucb 0.91 (mean 0.80)"}]
    figures = {"t-a": {"auto": {"a-1": {"decisions": 1, "outcomes": {"success": 1}}}}}
    layer = {"label": "teams.t-a", "section": "teams", "name": "t-a", "description": "", "aliases": {}}
    snap = team_snapshot(now=5.0, team="t-a", layer=layer, aliases=POLICY.aliases, figures=figures, recent=recent,
                         timeline=timelines.of("t-a"))
    assert snap["view"] == {"role": "team", "team": "t-a", "layer": layer}
    assert snap["teams"] == figures and snap["deployments"] == []
    assert snap["aliases"]["auto"]["share"] == {"a-1": 1.0} and snap["aliases"]["auto"]["timeline"]["decisions"] == 2
    assert snap["recent"] == [{k: v for k, v in recent[0].items() if k not in ("reason", "team")}]
    empty = team_snapshot(now=5.0, team="t-z", layer=None, aliases=POLICY.aliases, figures=figures, recent=[],
                          timeline=None)
    assert empty["teams"] == {"t-z": {}} and empty["view"]["layer"] is None
