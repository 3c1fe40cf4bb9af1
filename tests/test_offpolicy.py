"""Off-policy evaluation: exact on a tiny hand-checked log, and on synthetic logs whose true
answer is known, each policy's true value lies within the reported 95 % interval."""

from __future__ import annotations

import json
import math
import random

import pytest

from aisia_plugin.replay.offpolicy import LogError, LoggedEvent, evaluate, read_log

DEPS = ("a-1", "b-2", "c-3")
TRUE = {("coding", "a-1"): 0.3, ("coding", "b-2"): 0.8, ("coding", "c-3"): 0.5,
        ("math", "a-1"): 0.7, ("math", "b-2"): 0.4, ("math", "c-3"): 0.6}


def _ev(chosen, p, r, domain="coding", rid="r"):
    return LoggedEvent(rid, "auto", domain, DEPS, chosen, p, r)


def test_tiny_log_by_hand():
    events = [_ev("a-1", 0.5, 1.0), _ev("b-2", 0.25, 0.0), _ev("a-1", 0.5, 0.0), _ev("c-3", 0.25, 1.0)]
    out = evaluate(events, lambda e: {"a-1": 1.0})
    # w = 2 on the two a-1 events, 0 elsewhere: IPS = (2*1 + 2*0) / 4 = 0.5; SNIPS = 2 / 4 = 0.5.
    assert out["ips"]["value"] == pytest.approx(0.5)
    assert out["snips"]["value"] == pytest.approx(0.5)
    assert out["logged"]["value"] == pytest.approx(0.5)
    assert out["agreement"] == pytest.approx(0.5)
    # Effective sample size: (sum w)^2 / sum w^2 = 16 / 8.
    assert out["effective_sample_size"] == pytest.approx(2.0)


def _synthetic_log(seed: int, n: int = 3000, eps: float = 0.3):
    """An epsilon-greedy logging policy that prefers a-1 everywhere; Bernoulli rewards."""
    rng = random.Random(seed)
    events = []
    for i in range(n):
        domain = "coding" if rng.random() < 0.6 else "math"
        probs = {d: eps / 3 + (1 - eps if d == "a-1" else 0.0) for d in DEPS}
        chosen = rng.choices(DEPS, weights=[probs[d] for d in DEPS])[0]
        reward = 1.0 if rng.random() < TRUE[(domain, chosen)] else 0.0
        events.append(LoggedEvent(f"r{i}", "auto", domain, DEPS, chosen, probs[chosen], reward))
    return events


TARGETS = {
    "best-per-domain": lambda e: {max(DEPS, key=lambda d: TRUE[(e.domain, d)]): 1.0},
    "always-c": lambda e: {"c-3": 1.0},
    "uniform": lambda e: {d: 1 / 3 for d in DEPS},
}


def _truth(events, target):
    return sum(sum(p * TRUE[(e.domain, a)] for a, p in target(e).items()) for e in events) / len(events)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_true_value_within_the_interval(name):
    # One log with a fixed seed: a 95 % interval misses the truth for about one log in twenty by
    # construction, which test_coverage_over_many_logs measures; this one checks a single report.
    target = TARGETS[name]
    events = _synthetic_log(seed=7, n=6000)
    truth = _truth(events, target)
    out = evaluate(events, target)
    for est in ("ips", "snips", "dr"):
        lo, hi = out[est]["ci95"]
        assert lo <= truth <= hi, (name, est, truth, out[est])
    # The logging policy's own value is far from the best policy's: the estimate is not trivial.
    if name == "best-per-domain":
        assert out["dr"]["value"] - out["logged"]["value"] > 0.1


def test_coverage_over_many_logs():
    """Over 40 independent logs the intervals cover the truth about 95 % of the time."""
    hits = {"ips": 0, "dr": 0}
    runs = 40
    for seed in range(runs):
        events = _synthetic_log(seed, n=1500)
        target = TARGETS["best-per-domain"]
        truth = _truth(events, target)
        out = evaluate(events, target)
        for est in hits:
            lo, hi = out[est]["ci95"]
            hits[est] += lo <= truth <= hi
    for est, h in hits.items():
        assert h >= 0.85 * runs, (est, h)


def test_read_log_joins_decisions_and_outcomes(tmp_path):
    lines = [
        {"type": "decision", "request_id": "x", "attempt": 0, "alias": "auto", "domain": "math",
         "deployment": "a-1", "probability": 0.5, "candidates": ["a-1", "b-2"]},
        {"type": "decision", "request_id": "y", "attempt": 0, "alias": "auto", "deployment": None, "refused": "budget"},
        {"type": "outcome", "request_id": "x", "attempt": 0, "deployment": "a-1", "reward": 0.75, "success": True},
        {"type": "decision", "request_id": "z", "attempt": 0, "alias": "auto", "deployment": "b-2", "probability": 1.0},
    ]
    events = read_log([json.dumps(x) for x in lines])
    assert len(events) == 1
    e = events[0]
    assert (e.request_id, e.chosen, e.propensity, e.reward, e.domain, e.candidates) == \
        ("x", "a-1", 0.5, 0.75, "math", ("a-1", "b-2"))
    with pytest.raises(LogError, match="log.jsonl:2: not JSON"):
        read_log([json.dumps(lines[0]), "{oops"], "log.jsonl")


def test_an_answer_is_valued_by_the_evidence_logged_about_it():
    """A signal, a judge's grade or feedback recorded after the answer (the log's evidence lines)
    values it: their weighted mean; a failed attempt, another deployment's evidence, a malformed
    line or --no-evidence leave the logged reward; the log's other records are skipped."""
    def decided(rid, dep):
        return {"type": "decision", "request_id": rid, "attempt": 0, "alias": "auto", "deployment": dep,
                "probability": 0.5, "candidates": ["a-1", "b-2"]}

    def evidence(rid, dep, value, weight, source="signal"):
        return {"type": "evidence", "request_id": rid, "deployment": dep, "alias": "auto", "source": source,
                "value": value, "weight": weight}

    lines = [
        decided("x", "a-1"), {"type": "outcome", "request_id": "x", "attempt": 0, "deployment": "a-1",
                              "reward": 0.8, "success": True},
        evidence("x", "a-1", 0.0, 1.0), evidence("x", "a-1", 1.0, 3.0, "judge"),
        evidence("x", "b-2", 0.0, 5.0),  # another deployment's answer
        evidence("x", "a-1", 2.0, 1.0), evidence("x", "a-1", 0.5, 0.0), evidence("x", "a-1", "bad", 1.0),
        decided("y", "b-2"), {"type": "outcome", "request_id": "y", "attempt": 0, "deployment": "b-2",
                              "reward": 0.0, "success": False},
        evidence("y", "b-2", 1.0, 1.0),  # (about no answer: the attempt failed)
        {"type": "local_first", "request_id": "y", "alias": "auto", "result": "kept"},
        evidence("z", "a-1", 1.0, 1.0),  # a request the log holds no decision of
    ]
    text = [json.dumps(x) for x in lines]
    by_id = {e.request_id: e for e in read_log(text)}
    assert (by_id["x"].reward, by_id["x"].evidence) == (pytest.approx(0.75), 2)
    assert (by_id["y"].reward, by_id["y"].evidence) == (0.0, 0)
    plain = {e.request_id: e for e in read_log(text, evidence=False)}
    assert (plain["x"].reward, plain["x"].evidence) == (0.8, 0)
    assert evaluate(read_log(text), lambda e: {e.chosen: 1.0})["valued_by_evidence"] == 1
    with pytest.raises(LogError, match="log.jsonl:1: not a decision-log record"):
        read_log([json.dumps({"type": "trace", "request_id": "x"})], "log.jsonl")


def test_events_without_propensity_are_skipped_and_counted():
    events = [_ev("a-1", math.nan, 1.0), _ev("a-1", 0.0, 1.0), _ev("a-1", 1.0, 0.5)]
    out = evaluate(events, lambda e: {"a-1": 1.0})
    assert out["events"] == 1 and out["skipped_no_propensity"] == 2 and out["ips"]["value"] == 0.5


def test_engine_target_evaluates_a_policy_of_ours_on_the_log():
    """`aisia replay --logged` asks the engine what the policy would have chosen: for auto/cheap
    (cost strategy, learning breakers from the log's outcomes) the estimates cover the value of
    exactly the choices it made."""
    from aisia_plugin.decision import Deployment
    from aisia_plugin.policy import load_policy
    from aisia_plugin.replay.offpolicy import engine_target

    deps = [Deployment(d, d, f"p/{d}", d, input_cost_per_1m=c, output_cost_per_1m=c)
            for d, c in (("a-1", 0.5), ("b-2", 5.0), ("c-3", 2.0))]
    inner = engine_target(load_policy(), deps, alias="auto/cheap")
    asked = []

    def target(e):
        pi = inner(e)
        asked.append((e, pi))
        return pi

    events = _synthetic_log(seed=3, n=4000)
    out = evaluate(events, target)
    truth = sum(sum(p * TRUE[(e.domain, a)] for a, p in pi.items()) for e, pi in asked) / len(asked)
    chosen = {max(pi, key=pi.get) for _, pi in asked}
    assert "a-1" in chosen  # the cheapest serves while its breaker lets it
    for est in ("ips", "dr"):
        lo, hi = out[est]["ci95"]
        assert lo <= truth <= hi, (est, truth, out[est])


def test_replay_logged_prices_the_config_as_the_proxy_does(tmp_path, write_file, aisia):
    """With --deployments, a LiteLLM config's deployments are priced by LiteLLM as in the proxy:
    gpt-4o-mini is cheaper than gpt-4o there, while the policy's provider table prices every
    openai/ model alike; the cost strategy's choices must be the proxy's (the cheaper one, the one
    the log chose), so it agrees with every logged choice."""
    from aisia_plugin.decision import CandidateScore, Decision
    from aisia_plugin.decision_log import DecisionLog

    config = write_file("""
        model_list:
          - model_name: big
            litellm_params: {model: openai/gpt-4o, api_key: sk-none}
            model_info: {id: big}
          - model_name: mini
            litellm_params: {model: openai/gpt-4o-mini, api_key: sk-none}
            model_info: {id: mini}
        """, "litellm.yaml")
    log = DecisionLog(str(tmp_path / "decisions.jsonl"))
    for i in range(6):
        d = Decision("mini", "openai/gpt-4o-mini", "cost", "cheapest", 2, 1.0,
                     [CandidateScore("big", 0.0), CandidateScore("mini", 1.0)], probability=1.0, alias="auto/cheap")
        log.decision(f"r{i}", d)
        log.outcome(f"r{i}", "mini", alias="auto/cheap", success=True, reward=0.9)
    log.close()
    code, out, err = aisia("replay", "--logged", str(tmp_path / "decisions.jsonl"), "--alias", "auto/cheap",
                           "--deployments", config, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["events"] == 6 and report["agreement"] == 1.0


def test_replay_logged_without_the_config_prices_as_the_proxy_logged(tmp_path, aisia):
    """Without --deployments, each candidate is priced as the proxy priced it, from the prices
    each decision line carries (LiteLLM's first: here "big" at gpt-4o's, "mini" at gpt-4o-mini's),
    not at one default price for all: the cost strategy then chooses the proxy's cheaper "mini",
    the logged choice, every time. A log without prices says so."""
    from aisia_plugin.decision import CandidateScore, Decision
    from aisia_plugin.decision_log import DecisionLog

    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(str(path))
    for i in range(6):
        d = Decision("mini", "openai/gpt-4o-mini", "cost", "cheapest", 2, 1.0,
                     [CandidateScore("big", 0.0), CandidateScore("mini", 1.0)], probability=1.0, alias="auto/cheap")
        log.decision(f"r{i}", d, prices={"big": (2.5, 10.0), "mini": (0.15, 0.6), "not-a-candidate": (1.0, 1.0)})
        log.outcome(f"r{i}", "mini", alias="auto/cheap", success=True, reward=0.9)
    log.close()
    first = json.loads(path.read_text().splitlines()[0])
    assert first["prices"] == {"big": [2.5, 10.0], "mini": [0.15, 0.6]}
    code, out, err = aisia("replay", "--logged", path, "--alias", "auto/cheap", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["events"] == 6 and report["agreement"] == 1.0, report
    assert "no price" not in err

    unpriced = tmp_path / "old.jsonl"
    unpriced.write_text("\n".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "prices"})
                                  for line in path.read_text().splitlines()) + "\n")
    code, out, err = aisia("replay", "--logged", unpriced, "--alias", "auto/cheap", "--json")
    assert code == 0, err
    assert "the log gives no price for big, mini" in err and "--deployments CONFIG" in err, err
    assert json.loads(out)["agreement"] < 1.0  # one default price for both: not the proxy's choices


def test_replay_logged_values_answers_by_the_evidence_the_log_wrote(tmp_path, aisia):
    """The decision log's own evidence lines (DecisionLog.evidence) are read by the CLI: each
    answer a signal spoke about is valued by it; --no-evidence keeps the logged rewards, and
    applies to --logged only."""
    from aisia_plugin.decision import CandidateScore, Decision
    from aisia_plugin.decision_log import DecisionLog

    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(str(path))
    for i in range(6):
        d = Decision("mini", "openai/gpt-4o-mini", "cost", "cheapest", 2, 1.0,
                     [CandidateScore("big", 0.0), CandidateScore("mini", 1.0)], probability=1.0, alias="auto/cheap")
        log.decision(f"r{i}", d)
        log.outcome(f"r{i}", "mini", alias="auto/cheap", success=True, reward=0.9)
    for i in range(3):  # the next turns of three conversations said the answer was wrong
        log.evidence(f"r{i}", "mini", alias="auto/cheap", domain=None, source="signal", value=0.0, weight=1.0,
                     kind="correction", language="en")
    log.close()
    code, out, err = aisia("replay", "--logged", path, "--alias", "auto/cheap", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["valued_by_evidence"] == 3 and report["logged"]["value"] == pytest.approx(0.45)
    code, out, err = aisia("replay", "--logged", path, "--alias", "auto/cheap", "--json", "--no-evidence")
    assert code == 0, err
    report = json.loads(out)
    assert report["valued_by_evidence"] == 0 and report["logged"]["value"] == pytest.approx(0.9)
    code, out, err = aisia("replay", "--scenario", "stationary", "--no-evidence")
    assert code == 2 and "--no-evidence applies to --logged only" in err
