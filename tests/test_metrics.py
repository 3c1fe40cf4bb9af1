"""Router metrics: the seed's names and labels, values that follow the events, label values
bounded to configured names, and a Grafana dashboard whose every query names an exported metric."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from aisia_plugin.decision import Decision
from aisia_plugin.metrics import EXPORTED, RouterMetrics
from aisia_plugin.pacing import PaceRule

DASHBOARD = Path(__file__).resolve().parents[1] / "examples" / "grafana" / "aisia-dashboard.json"


def _metrics():
    reg = CollectorRegistry()
    m = RouterMetrics(reg)
    m.configure(aliases=["auto", "auto/coding"], domains=["coding", "math"], deployments=["a-1", "b-2"],
                strategies=["ucb1", "cost"])
    return reg, m


def _value(reg, name, **labels):
    v = reg.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_decisions_choices_and_refusals_are_counted_with_bounded_labels():
    reg, m = _metrics()
    d = Decision("a-1", "openai/x", "ucb1", "best", 2, 0.9, alias="auto/coding", domain="coding")
    for _ in range(3):
        m.decision(d, 2e-5)
    m.decision(Decision("b-2", "x", "cost", "retry", 1, 0.5, alias="auto", domain=None), 3e-5, failover=True)
    m.decision(Decision(None, None, "cost", "over budget", 0, None, alias="auto", refused="budget"), 1e-5)
    # A name nobody configured (a client's typo, a prompt fragment) never becomes a label value.
    m.decision(Decision("secret prompt text", "x", "evil", "r", 1, 0.1, alias="auto/../x", domain="hack"), 1e-5)
    assert _value(reg, "ai_bandit_choice_total", provider="a-1", strategy="ucb1") == 3
    assert _value(reg, "ai_bandit_choice_total", provider="other", strategy="other") == 1
    assert _value(reg, "aisia_decisions_total", alias="auto/coding", domain="coding", deployment="a-1",
                  result="routed") == 3
    assert _value(reg, "aisia_decisions_total", alias="auto", domain="none", deployment="none", result="refused") == 1
    assert _value(reg, "aisia_refusals_total", alias="auto", reason="budget") == 1
    assert _value(reg, "aisia_failovers_total", alias="auto") == 1
    assert _value(reg, "aisia_decision_seconds_count", alias="auto/coding") == 3
    text = generate_latest(reg).decode()
    assert "secret" not in text and "hack" not in text and "evil" not in text


def test_breakers_and_learned_gauges():
    reg, m = _metrics()
    m.breakers({"a-1": "OPEN", "b-2": "HALF_OPEN", "zzz": "OPEN"})
    assert _value(reg, "ai_circuit_breaker_state", provider="a-1") == 2
    assert _value(reg, "ai_circuit_breaker_state", provider="b-2") == 1
    assert reg.get_sample_value("ai_circuit_breaker_state", {"provider": "zzz"}) is None
    m.breakers({"a-1": "CLOSED"})
    assert _value(reg, "ai_circuit_breaker_state", provider="a-1") == 0
    m.learned({"a-1": {"pulls": 4.0, "mean_reward": 0.75, "avg_latency": 0.2,
                       "domains": {"coding": {"pulls": 2.0, "mean_reward": 0.5}}}})
    assert _value(reg, "aisia_learned_mean_reward", deployment="a-1", domain="none") == 0.75
    assert _value(reg, "aisia_learned_mean_reward", deployment="a-1", domain="coding") == 0.5
    assert _value(reg, "aisia_learned_latency_seconds", deployment="a-1") == 0.2
    m.outcome("auto", "a-1", "provider_failure")
    m.store_event("fallback")
    m.store_event("not-an-event")
    m.reload("ok")
    assert _value(reg, "aisia_outcomes_total", alias="auto", deployment="a-1", result="provider_failure") == 1
    assert _value(reg, "aisia_state_store_events_total", event="fallback") == 1
    assert _value(reg, "aisia_state_store_events_total", event="other") == 1
    assert _value(reg, "aisia_policy_reloads_total", result="ok") == 1


def test_spend_target_gauges_from_the_engines_rules_and_the_stores_records():
    reg, m = _metrics()
    rules = {"auto": PaceRule(2.0, 1.0, 100.0), "auto/coding": PaceRule(0.5, 1.0, 20.0), "not-configured": PaceRule(9.0)}
    m.pacing(rules, {"auto": {"multiplier": 3.5, "spend_per_1k": 2.25, "count": 10.0, "spend_usd": 0.02, "updated": 1.0},
                     "auto/coding": {"multiplier": 50.0, "spend_per_1k": 0.75, "count": 3.0, "spend_usd": 0.002,
                                     "updated": 1.0}})
    assert _value(reg, "aisia_spend_target_usd_per_1k_requests", alias="auto") == 2.0
    assert _value(reg, "aisia_spend_usd_per_1k_requests", alias="auto") == 2.25
    assert _value(reg, "aisia_spend_multiplier", alias="auto") == 3.5
    assert _value(reg, "aisia_spend_multiplier", alias="auto/coding") == 20.0  # a reload lowered the bound
    assert reg.get_sample_value("aisia_spend_target_usd_per_1k_requests", {"alias": "other"}) is None
    m.pacing({"auto": PaceRule(2.0)}, {})  # a target with nothing spent yet: the weight as configured
    assert _value(reg, "aisia_spend_multiplier", alias="auto") == 1.0


def test_every_exported_metric_is_registered():
    reg, _ = _metrics()
    names = {metric.name for metric in reg.collect()}
    # prometheus_client reports counters without their _total suffix.
    assert {n[:-6] if n.endswith("_total") else n for n in EXPORTED} == names


def test_every_dashboard_query_names_an_exported_metric():
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    suffixes = ("_bucket", "_count", "_sum")
    used = set()
    for expr in exprs:
        names = {n for n in re.findall(r"\b((?:ai|aisia)_[a-z_]+)\b", expr)}
        assert names, expr
        for n in names:
            base = next((n[: -len(s)] for s in suffixes if n.endswith(s) and n[: -len(s)] in EXPORTED), n)
            assert base in EXPORTED, (n, expr)
            used.add(base)
    # The panels the issue asks for: choices, breakers, decision latency, reward, failovers, Redis.
    for needed in ("aisia_decisions_total", "ai_circuit_breaker_state", "aisia_decision_seconds",
                   "aisia_learned_mean_reward", "aisia_failovers_total", "aisia_state_store_events_total"):
        assert needed in used


def test_counts_follow_a_reconfigured_vocabulary():
    """The per-request children are kept by their label values: after a reload renames the
    vocabulary, a name that became unknown is counted under 'other', a new one under itself."""
    reg, m = _metrics()
    d = Decision("a-1", "openai/x", "ucb1", "best", 2, 0.9, alias="auto/coding", domain="coding")
    m.decision(d, 2e-5)
    m.outcome("auto/coding", "a-1", "success")
    m.configure(aliases=["auto/coding"], domains=["coding"], deployments=["c-3"], strategies=["ucb1"])
    m.decision(d, 2e-5)
    m.outcome("auto/coding", "a-1", "success")
    m.decision(Decision("c-3", "x", "ucb1", "best", 2, 0.9, alias="auto/coding", domain="coding"), 2e-5)
    m.outcome("auto/coding", "c-3", "success")
    m.outcome("auto/coding", "c-3", "success")
    assert _value(reg, "aisia_decisions_total", alias="auto/coding", domain="coding", deployment="a-1",
                  result="routed") == 1
    assert _value(reg, "aisia_decisions_total", alias="auto/coding", domain="coding", deployment="other",
                  result="routed") == 1
    assert _value(reg, "aisia_decisions_total", alias="auto/coding", domain="coding", deployment="c-3",
                  result="routed") == 1
    assert _value(reg, "ai_bandit_choice_total", provider="c-3", strategy="ucb1") == 1
    assert _value(reg, "aisia_outcomes_total", alias="auto/coding", deployment="a-1", result="success") == 1
    assert _value(reg, "aisia_outcomes_total", alias="auto/coding", deployment="other", result="success") == 1
    assert _value(reg, "aisia_outcomes_total", alias="auto/coding", deployment="c-3", result="success") == 2
    assert _value(reg, "aisia_decision_seconds_count", alias="auto/coding") == 3


def test_event_counters_exist_at_zero_from_the_start_for_their_known_label_sets():
    # A healthy proxy that never failed over, reloaded, refused or saw a store event still
    # exports these series (at 0): the shipped Grafana panels show 0, not "No data".
    reg, _ = _metrics()
    text = generate_latest(reg).decode()
    for alias in ("auto", "auto/coding"):
        assert f'aisia_failovers_total{{alias="{alias}"}} 0.0' in text
        for reason in ("budget", "no_candidates"):
            assert f'aisia_refusals_total{{alias="{alias}",reason="{reason}"}} 0.0' in text
    assert 'aisia_refusals_total{alias="other",reason="unknown_alias"} 0.0' in text
    for result in ("ok", "invalid", "unreadable"):
        assert f'aisia_policy_reloads_total{{result="{result}"}} 0.0' in text
    for event in ("fallback", "reconnect", "batch_flushed", "outcomes_merged", "queue_full", "reseeded"):
        assert f'aisia_state_store_events_total{{event="{event}"}} 0.0' in text


def test_per_request_children_follow_a_vocabulary_change():
    """The routed decisions' and outcomes' children are kept by the names as given: a reload that
    makes a name known (or unknown) counts the next events under its new label, as labelling each
    event afresh would."""
    reg, m = _metrics()
    new = Decision("c-3", "x", "ucb1", "best", 2, 0.9, alias="auto", domain="math")
    m.decision(new, 2e-5)
    m.outcome("auto", "c-3", "success")
    m.configure(aliases=["auto", "auto/coding"], domains=["coding", "math"], deployments=["a-1", "b-2", "c-3"],
                strategies=["ucb1", "cost"])
    m.decision(new, 2e-5, failover=True)
    m.outcome("auto", "c-3", "success")
    m.configure(aliases=["auto/coding"], domains=["coding"], deployments=["a-1"], strategies=["cost"])
    m.decision(new, 2e-5)
    m.outcome("auto", "c-3", "provider_failure")
    decided = {(s.labels["alias"], s.labels["domain"], s.labels["deployment"]): s.value
               for s in reg.collect() if s.name == "aisia_decisions" for s in s.samples
               if s.name == "aisia_decisions_total"}
    assert decided == {("auto", "math", "other"): 1, ("auto", "math", "c-3"): 1, ("other", "other", "other"): 1}
    assert _value(reg, "ai_bandit_choice_total", provider="c-3", strategy="ucb1") == 1
    assert _value(reg, "ai_bandit_choice_total", provider="other", strategy="ucb1") == 1
    assert _value(reg, "ai_bandit_choice_total", provider="other", strategy="other") == 1
    assert _value(reg, "aisia_failovers_total", alias="auto") == 1
    assert _value(reg, "aisia_decision_seconds_count", alias="auto") == 2
    assert _value(reg, "aisia_decision_seconds_count", alias="other") == 1
    assert _value(reg, "aisia_outcomes_total", alias="auto", deployment="other", result="success") == 1
    assert _value(reg, "aisia_outcomes_total", alias="auto", deployment="c-3", result="success") == 1
    assert _value(reg, "aisia_outcomes_total", alias="other", deployment="other", result="provider_failure") == 1


def test_per_request_children_are_bounded(monkeypatch):
    import aisia_plugin.metrics as metrics

    monkeypatch.setattr(metrics, "_MAX_CHILDREN", 3)
    reg, m = _metrics()
    for i in range(10):
        m.decision(Decision(f"dep-{i}", "x", "ucb1", "best", 2, 0.9, alias="auto", domain=None), 1e-5)
        m.outcome("auto", f"dep-{i}", "success")
        assert len(m._routed) <= 3 and len(m._outcomes) <= 3
    assert _value(reg, "ai_bandit_choice_total", provider="other", strategy="ucb1") == 10
    assert _value(reg, "aisia_outcomes_total", alias="auto", deployment="other", result="success") == 10


def test_configure_creates_the_known_children_once():
    """The gauges' refresh calls configure every few seconds and on every scrape: with the same
    vocabularies (in any order, any iterable) it labels nothing again; a changed one does."""
    _, m = _metrics()
    vocab = dict(aliases=["auto", "auto/coding"], domains=["coding", "math"], deployments=["a-1", "b-2"],
                 strategies={"ucb1", "cost"})
    m.configure(**vocab)
    labelled = []
    for metric in (m.failovers, m.refusals, m.reloads, m.store_events):
        real = metric.labels
        metric.labels = lambda *a, _real=real, **k: (labelled.append(a), _real(*a, **k))[1]
    for _ in range(3):
        m.configure(aliases={"auto/coding": 1, "auto": 2}, domains=("math", "coding"), deployments=iter(["b-2", "a-1"]),
                    strategies=["cost", "ucb1"])
    assert labelled == []
    m.configure(**{**vocab, "aliases": ["auto", "auto/coding", "auto/fast"]})
    assert ("auto/fast",) in labelled


def test_conversation_signals_are_counted_by_kind_and_language_with_bounded_labels(monkeypatch):
    reg, m = _metrics()
    m.signal("correction", "fr")
    m.signal("correction", "fr")
    m.signal("satisfaction", "en")
    m.signal("regenerate", "")
    m.signal("made-up kind", "en")
    m.signal("correction", "<script> not a language")
    assert _value(reg, "aisia_conversation_signals_total", kind="correction", language="fr") == 2
    assert _value(reg, "aisia_conversation_signals_total", kind="satisfaction", language="en") == 1
    assert _value(reg, "aisia_conversation_signals_total", kind="regenerate", language="none") == 1
    assert _value(reg, "aisia_conversation_signals_total", kind="other", language="en") == 1
    assert _value(reg, "aisia_conversation_signals_total", kind="correction", language="other") == 1
    # The languages are the policy's lexicons' (operator data): bounded all the same.
    monkeypatch.setattr("aisia_plugin.metrics.MAX_SIGNAL_LANGUAGES", 4)
    for lang in ("de", "es", "it", "pt"):
        m.signal("dissatisfaction", lang)
    assert _value(reg, "aisia_conversation_signals_total", kind="dissatisfaction", language="de") == 1
    assert _value(reg, "aisia_conversation_signals_total", kind="dissatisfaction", language="pt") == 0
    assert _value(reg, "aisia_conversation_signals_total", kind="dissatisfaction", language="other") == 2


def test_team_figures_read_each_teams_counters_or_one_teams_only():
    from aisia_plugin.metrics import team_figures

    reg, m = _metrics()
    d = Decision("a-1", "openai/x", "ucb1", "best", 2, 0.9, alias="auto", domain="coding")
    for team in ("team-a", "team-a", "team-b"):
        m.team_decision(team, d)
    m.team_outcome("team-a", "auto", "a-1", "success")
    m.team_outcome("team-a", "auto", "a-1", "provider_failure")
    m.team_outcome("team-b", "auto", "b-2", "success")
    m.team_decision(None, d)  # a key of no team: no team's row
    every = team_figures(reg)
    assert every == {"team-a": {"auto": {"a-1": {"decisions": 2, "outcomes": {"success": 1, "provider_failure": 1}}}},
                     "team-b": {"auto": {"a-1": {"decisions": 1, "outcomes": {}},
                                         "b-2": {"decisions": 0, "outcomes": {"success": 1}}}}}
    assert team_figures(reg, "team-b") == {"team-b": every["team-b"]}
    assert team_figures(reg, "team-c") == {}
