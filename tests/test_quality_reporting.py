"""How the router reports and replays what it learned about answer quality: `aisia replay
--logged` (an answer valued 0 is quality, not a failure; the evidence of a question of no domain
reaches the record the contextual strategy reads; the decision line's features; evidence in another
worker's file; an odd line's clear error), x-aisia-reason's "prior alone", and the stats' priors
after another engine is built over the store. Each test was written by a review and seen failing
before its fix; its docstring says what was wrong."""

from __future__ import annotations

import asyncio
import json

import pytest

from proxy_harness import deployment, upstreams_fixture
from router_harness import PluginRouters

from aisia_plugin.decision import Deployment
from aisia_plugin.policy import load_policy
from aisia_plugin.replay.offpolicy import engine_target, evaluate, read_log


def _decided(rid, dep, *, alias="auto", domain=None, candidates=("dear", "cheap"), probability=0.5):
    return {"v": 1, "type": "decision", "request_id": rid, "attempt": 0, "alias": alias, "domain": domain,
            "deployment": dep, "probability": probability, "candidates": list(candidates)}


def _served(rid, dep, reward=0.7):
    return {"v": 1, "type": "outcome", "request_id": rid, "attempt": 0, "deployment": dep, "reward": reward,
            "success": True, "status": 200}


def _evidence(rid, dep, value, *, alias="auto", domain=None, kind="correction"):
    return {"v": 1, "type": "evidence", "request_id": rid, "deployment": dep, "alias": alias, "domain": domain,
            "source": "signal", "kind": kind, "language": "en", "value": value, "weight": 1.0}


DEAR_AND_CHEAP = [Deployment("dear", "dear", "p/dear", "p", input_cost_per_1m=10.0, output_cost_per_1m=10.0),
                  Deployment("cheap", "cheap", "p/cheap", "p", input_cost_per_1m=0.1, output_cost_per_1m=0.1)]


def _target_probabilities(lines, policy, deps, alias):
    """The probabilities `aisia replay --logged` gives each logged event's candidates, in log order."""
    events = read_log([json.dumps(x) for x in lines])
    inner = engine_target(policy, deps, alias=alias)
    asked = []

    def target(e):
        pi = inner(e)
        asked.append(pi)
        return pi

    return evaluate(events, target), asked


# -- 1. replay --logged learns an answer a user called wrong as a provider failure ------------------

def test_replay_logged_learns_an_answer_valued_0_as_quality_not_as_a_provider_failure():
    """A served answer the next turn called wrong (a correction: evidence of value 0) is quality
    evidence: in the proxy it never touches the deployment's health or breaker. The replay's
    learning target records it as ``Outcome(success=e.reward > 0)``: a failed call, so five such
    answers open the breaker of the cheap deployment and the cost strategy (which ranks on price
    and health only) leaves it, though in the proxy it would never have."""
    lines = []
    for i in range(20):
        lines += [_decided(f"r{i}", "mini", alias="auto/cheap", candidates=("big", "mini"), probability=1.0),
                  _served(f"r{i}", "mini", reward=0.9), _evidence(f"r{i}", "mini", 0.0, alias="auto/cheap")]
    deps = [Deployment("big", "big", "p/big", "p", input_cost_per_1m=5.0, output_cost_per_1m=5.0),
            Deployment("mini", "mini", "p/mini", "p", input_cost_per_1m=0.1, output_cost_per_1m=0.1)]
    out, asked = _target_probabilities(lines, load_policy(), deps, "auto/cheap")
    # The cost strategy picks the cheapest healthy deployment: "mini", on every event.
    left = [k for k, pi in enumerate(asked) if pi.get("mini", 0.0) < 1.0]
    assert not left, f"the replay moved off 'mini' from event {left[0]} on (its breaker opened on answers " \
                     f"valued 0): {asked[left[0]]}"
    assert out["agreement"] == 1.0


# -- 2. replay --logged: the contextual strategy never learns the evidence of general questions -----

def test_replay_logged_contextual_learns_the_evidence_of_questions_of_no_domain():
    """In the proxy, the evidence about an answer to a question of no detected domain is recorded
    under the `_other` quality record the contextual strategy reads for such questions (Decision.
    context.domain). The replay's target records the log's rewards against the alias with the
    logged domain (None), i.e. in the global record only, and decides with the `_other` record:
    on general traffic (most of it) the replayed contextual policy never learns anything from the
    log. Here the cheap deployment's answers are all valued 0.05 and the dear one's 1.0: with a
    detected domain the replay learns to leave the cheap one, without one it keeps choosing it."""

    def last_share_of_cheap(domain):
        lines = []
        for i in range(200):
            dep = "cheap" if i % 2 else "dear"
            lines += [_decided(f"r{i}", dep, domain=domain), _served(f"r{i}", dep),
                      _evidence(f"r{i}", dep, 0.05 if dep == "cheap" else 1.0, domain=domain or "_other",
                                kind="correction" if dep == "cheap" else "satisfaction")]
        _, asked = _target_probabilities(lines, load_policy(), DEAR_AND_CHEAP, "auto")
        return sum(pi.get("cheap", 0.0) for pi in asked[-20:]) / 20

    assert last_share_of_cheap("math") < 0.5  # learned, with a domain
    assert last_share_of_cheap(None) < 0.5, "with no detected domain the replay never learned the cheap " \
                                            "deployment's answers were bad"


# -- 3. the proxy's decision line holds no features: replay decides every request as "default" -------

POLICY = """\
version: 1
logging:
  decisions: {path: DECISIONS}
aliases:
  rev/pool:
    description: two deployments
    strategy: contextual
    candidates: {models: [rca, rcb]}
"""


upstreams = upstreams_fixture([{"name": n, "input_cost_per_1m": c, "output_cost_per_1m": c}
                               for n, c in (("rca", 0.1), ("rcb", 0.2))])


async def test_the_proxys_decision_line_carries_the_features_replay_decides_with(tmp_path, upstreams):
    """docs/operations.md: `aisia replay --logged` decides for each logged attempt "with the engine
    (its logged domain and features ...)". The proxy's decision line (Observer._decided) is written
    without ``features``, and read_log reads them only from there: every replayed request is a
    ``default`` task of 0 input tokens without code, whatever was asked (the line's own
    top-level task_type is "coding")."""
    log_path = tmp_path / "d.jsonl"
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY.replace("DECISIONS", json.dumps(str(log_path))))
    routers = PluginRouters([policy])
    try:
        router, plugin = routers.make([deployment(n, u) for n, u in upstreams.items()], disable_cooldowns=True)
        await router.acompletion(model="rev/pool", messages=[
            {"role": "user", "content": "Write a Python function that merges two sorted lists"}])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while loop.time() < deadline:
            plugin.observer.decision_log.flush()
            text = log_path.read_text() if log_path.exists() else ""
            if '"type": "outcome"' in text:
                break
            await asyncio.sleep(0.05)
    finally:
        routers.close()
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    decision = next(x for x in lines if x["type"] == "decision")
    assert decision["task_type"] == "coding"
    (event,) = read_log(log_path.read_text().splitlines())
    assert event.features.get("task_type") == "coding", \
        f"replay --logged reads the request's features as {dict(event.features)} (the line: {sorted(decision)})"
    assert event.features.get("input_tokens"), "the request's input tokens are lost"


# -- 4. several workers: evidence written by another worker's file is never joined -------------------

def test_replay_logged_joins_evidence_written_by_another_workers_file(tmp_path, aisia):
    """With several workers each writes decisions.<pid>.jsonl and `aisia replay --logged
    decisions.jsonl` reads every such file (docs/operations.md). A conversation's next turn, or a
    feedback POST, is served by any worker: the evidence line about an answer is often in another
    worker's file than its decision and outcome. read_log is run per file, so such evidence is
    never joined to the answer it is about: the answer is valued by its logged reward instead."""
    first = tmp_path / "decisions.1111.jsonl"
    second = tmp_path / "decisions.2222.jsonl"
    first.write_text("\n".join(json.dumps(x) for x in (
        _decided("r0", "mini", alias="auto/cheap", candidates=("big", "mini"), probability=1.0),
        _served("r0", "mini", reward=0.9))) + "\n")
    second.write_text(json.dumps(_evidence("r0", "mini", 0.0, alias="auto/cheap")) + "\n")
    code, out, err = aisia("replay", "--logged", tmp_path / "decisions.jsonl", "--alias", "auto/cheap", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["valued_by_evidence"] == 1 and report["logged"]["value"] == pytest.approx(0.0), report


# -- 5. an odd decision log line: a traceback, not a clear error ---------------------------------------

@pytest.mark.parametrize("line", [
    {"type": "decision", "request_id": "r", "attempt": "x", "alias": "auto/cheap", "deployment": "mini",
     "probability": 1.0},
    {"type": "decision", "request_id": "r", "attempt": 0, "alias": "auto/cheap", "deployment": "mini",
     "probability": 1.0, "candidates": ["mini"], "features": ["coding"]},
    {"type": "decision", "request_id": "r", "attempt": 0, "alias": "auto/cheap", "deployment": "mini",
     "probability": 1.0, "candidates": ["mini"], "features": {"input_tokens": True}},
], ids=["attempt-not-a-number", "features-not-an-object", "input-tokens-a-boolean"])
def test_replay_logged_refuses_an_odd_log_line_with_a_clear_error(tmp_path, aisia, line):
    """`aisia replay --logged`: "Exit status ... 1 invalid policy, log or deployments file"; a
    line that is no decision-log record is "an error naming the file and line" (read_log). A
    decision line whose attempt is not a number, or whose features are not an object, raises
    out of the command instead (ValueError / AttributeError: a traceback)."""
    path = tmp_path / "decisions.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(_served("r", "mini")) + "\n")
    try:
        code, out, err = aisia("replay", "--logged", path, "--alias", "auto/cheap")
    except Exception as exc:  # what the command line prints as a traceback
        pytest.fail(f"aisia replay --logged raised {type(exc).__name__}: {exc}")
    assert code == 1 and "decisions.jsonl:1" in err, (code, err)


# -- 6. x-aisia-reason: the contextual base of a general question rests on the prior alone -----------

def test_the_reason_says_prior_alone_when_the_choice_read_an_empty_quality_record():
    """The contextual strategy reads a question of no detected domain in the `_other` quality
    record (docs/quality.md#the-choice). A deployment with evidence in math only is, for a
    general question, read at its declared prior (the reason shows 'its mean 0.750', the pro
    prior); rests_on_prior looks at the decision's domain (None: the global record, which sums
    the math evidence) and so the reason does not say the choice rests on the prior alone."""
    from aisia_plugin.engine import Engine
    from aisia_plugin.litellm import headers
    from aisia_plugin.litellm.lifecycle import Attempt, Call
    from aisia_plugin.state.memory import MemoryState

    engine = Engine(load_policy(), clock=lambda: 0.0, store=MemoryState())
    deps = [Deployment("d1", "g", "p/d1", "p", tier="pro")]
    math = engine.decide("auto", [{"role": "user", "content": "Solve the integral of x^2 dx and prove the "
                                                              "derivative theorem, compute the equation"}], deps)
    assert math.context.domain == "math"
    for _ in range(5):
        engine.record_quality("d1", "auto", math.domain, 1.0, "feedback", context=math.context)
    general = engine.decide("auto", [{"role": "user", "content": "What's a good name for my cat?"}], deps)
    assert general.domain is None and general.context.domain == "_other"
    assert engine.store.quality_of("d1", "_other") is None  # nothing known of d1 on such questions
    assert "its mean 0.750" in general.reason  # the base read: the declared pro prior
    reason = headers.response_headers(Call("auto", "rid", None, 0.0), Attempt(general, ("d1",), {}, deployment_id="d1"),
                                      False, engine)["x-aisia-reason"]
    assert headers.PRIOR_ONLY in reason, reason


# -- 7. the stats' prior (and so the estimate) forgets the declared tier when an engine is rebuilt ---

def test_the_stats_show_the_declared_prior_after_a_reload_or_a_layers_engine():
    """/admin/bandit/stats, `aisia stats --url` and the routing page show beside each deployment
    its declared prior (tier, specialities) and the estimate from it. The store reads both from
    ``store.quality_prior``, which every Engine built over the store replaces with its own
    QualityPriors, knowing only the deployments *it* has decided among: after a policy reload
    (Runtime.new_engine) or once a team's layer gets its engine (layering.Scopes.engine), an ultra
    deployment's prior reads 0.5 (untiered) and its estimate is computed from 0.5, while the
    router's next decision reads it at 0.85."""
    from aisia_plugin.engine import Engine
    from aisia_plugin.state.memory import MemoryState

    store = MemoryState()
    policy = load_policy()
    engine = Engine(policy, clock=lambda: 0.0, store=store)
    deps = [Deployment("big", "g", "p/big", "p", tier="ultra")]
    d = engine.decide("auto", [{"role": "user", "content": "What's a good name for my cat?"}], deps)
    engine.record_quality("big", "auto", None, 1.0, "feedback", context=d.context)
    before = store.stats()["big"]["quality"]
    assert before["prior"] == pytest.approx(0.85)
    Engine(policy, clock=lambda: 0.0, store=store)  # a reload's engine (or a team layer's), over the same store
    after = store.stats()["big"]["quality"]
    assert (after["prior"], after["estimate"]) == (pytest.approx(before["prior"]), pytest.approx(before["estimate"])), \
        f"the stats now show prior {after['prior']} and estimate {after['estimate']} " \
        f"(before: {before['prior']}, {before['estimate']}); nothing learned changed"


def test_a_reload_keeps_the_stats_priors_of_the_deployments_already_met(tmp_path):
    """The proxy's reload builds a new engine (Runtime.swap): the stats' priors are its, knowing
    the deployments the previous engine met (before, every one read untiered until traffic
    passed again); a team layer's engine never replaces the operator's priors."""
    from aisia_plugin.engine import Engine
    from aisia_plugin.litellm.runtime import Runtime
    from aisia_plugin.policy.loader import load_policy_with_locations
    from aisia_plugin.state.memory import MemoryState

    (tmp_path / "p.yaml").write_text("version: 1\n")
    loaded = load_policy_with_locations([tmp_path / "p.yaml"])
    rt = Runtime(loaded, MemoryState())
    deps = [Deployment("big", "g", "p/big", "p", tier="ultra")]
    d = rt.engine.decide("auto", [{"role": "user", "content": "What's a good name for my cat?"}], deps)
    rt.engine.record_quality("big", "auto", None, 1.0, "feedback", context=d.context)
    before = rt.store.stats()["big"]["quality"]
    assert before["prior"] == pytest.approx(0.85)
    Engine(rt.policy, store=rt.store)  # a layer's engine over the same store
    assert rt.store.stats()["big"]["quality"] == before
    rt.swap(load_policy_with_locations([tmp_path / "p.yaml"]))
    assert rt.store.quality_prior is rt.engine.quality
    assert rt.store.stats()["big"]["quality"] == before


def test_replay_logged_learns_no_quality_from_a_plain_success():
    """The proxy learns quality from evidence only: a success nobody spoke about is logged with
    the reward the deployment's estimate gave it, not a grade. The replayed policy fed those
    rewards to its engine as a judge's grades, so what it chose followed them (here a cheap
    deployment whose plain successes were logged at 0.95, against 0.05: the logged rewards of
    another router's estimates). It now learns them as the proxy did: health, no quality."""

    def chosen(cheap_reward):
        lines = []
        for i in range(200):
            dep = "cheap" if i % 2 else "dear"
            lines += [_decided(f"r{i}", dep), _served(f"r{i}", dep, reward=cheap_reward if dep == "cheap" else 0.5)]
        _, asked = _target_probabilities(lines, load_policy(), DEAR_AND_CHEAP, "auto")
        return asked

    assert chosen(0.95) == chosen(0.05)
