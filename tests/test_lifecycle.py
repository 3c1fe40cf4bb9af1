"""The request's tracker (aisia_plugin/litellm/lifecycle.py) driven over plain data, without
LiteLLM: every path the plugin's hooks take a call and its attempts through, as the hooks call the
transitions (decide in the filter, send in the per-attempt hook, fail / settle / learn from the
per-attempt hooks and logging events, answer in the header hook, spent and exhausted in the
failure paths), and the transitions each state refuses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aisia_plugin.breaker import FailureKind
from aisia_plugin.decision import Decision
from aisia_plugin.litellm.events import attempt_failure
from aisia_plugin.litellm.lifecycle import AttemptState, Call, IllegalTransition, Phase, Refused, ServedAnswer
from aisia_plugin.outcome import Outcome
from aisia_plugin.policy import load_policy

RULES = load_policy([]).circuit_breaker  # the shipped circuit-breaker settings (the classifier's)


def _decision(chosen: str, domain: str = "coding") -> Decision:
    return Decision(chosen, None, "ucb1", "best", 3, 0.9, alias="auto/x", domain=domain)


def _decided(call: Call, chosen: str, ranked=("a", "b", "c")):
    """The filter's step: an attempt DECIDED over `ranked` (the choice first)."""
    ranked = (chosen, *[r for r in ranked if r != chosen])
    return call.decide(_decision(chosen), ranked, {})


def _sent(call: Call, chosen: str, now: float = 1.0):
    attempt = _decided(call, chosen)
    assert call.send(chosen, now) is attempt
    return attempt


def _ok(dep: str) -> Outcome:
    return Outcome(dep, True, latency_s=0.2, status_code=200, cost_usd=0.001)


def _provider_500(dep: str) -> Outcome:
    return Outcome(dep, False, status_code=500, error_type=["InternalServerError"], message="upstream crashed")


def _odd_500(dep: str) -> Outcome:
    """A failure neither plainly the provider's nor the client's: what the same request meeting
    it on two deployments makes the caller's. Quotes the deployment's own name."""
    return Outcome(dep, False, status_code=500, error_type=["APIError"], message=f"{dep}: cannot parse part 3")


def _bad_request(dep: str) -> Outcome:
    return Outcome(dep, False, status_code=400, error_type=["BadRequestError"], message="invalid 'temperature'")


def _fail(call: Call, attempt, outcome, provider: str = "openai"):
    """The per-attempt failure hook's step: the failure read as the rule reads it (every
    deployment of one provider unless told: the cross-provider rule is blame's, tests/test_blame.py)."""
    failure = attempt_failure(outcome, provider, (attempt.deployment_id,), call.answered)
    return call.fail(attempt, outcome, failure, RULES)


def test_the_tracker_imports_no_litellm():
    code = ("import sys; import aisia_plugin.litellm.lifecycle; "
            "print(sorted(m for m in sys.modules if m == 'litellm' or m.startswith('litellm.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_success_then_its_headers():
    call = Call("auto/x", "r1", None, 0.0)
    attempt = _sent(call, "a", now=5.0)
    assert (attempt.state, attempt.deployment_id, attempt.started, attempt.explained["served_by"]) == \
        (AttemptState.SENT, "a", 5.0, "a")
    served, closed = call.learn(attempt, _ok("a"))
    assert served == ServedAnswer("a", attempt.decision) and served.decision.domain == "coding"
    assert (attempt.state, call.phase, closed) == (AttemptState.LEARNED, Phase.FINISHED, False)
    assert call.learn(attempt, _ok("a")) is None  # the logging event after the per-attempt hook: once
    assert call.answer() is True and call.phase is Phase.CLOSED
    assert call.serve("a", attempt.decision) is None  # served once


def test_headers_then_the_success_event():
    call = Call("auto/x", "r1", None, 0.0)
    attempt = _sent(call, "a")
    assert call.answer() is False and call.phase is Phase.ANSWERED and call.answered and not call.finished
    assert call.serve("a", attempt.decision) == ServedAnswer("a", attempt.decision)  # registered at the headers
    served, closed = call.learn(attempt, _ok("a"))
    assert served is None and closed is True and call.phase is Phase.CLOSED


def test_a_failure_settled_by_the_next_attempts_success():
    call = Call("auto/x", "r1", None, 0.0)
    first = _sent(call, "a")
    assert _fail(call, first, _provider_500("a")) == []  # unproven: waits for the next outcome
    assert first.state is AttemptState.PENDING and call.pending.attempt is first
    assert call.failures[0].deployment_id == "a" and call.failures[0].kind is FailureKind.PROVIDER
    assert call.refusal(max_attempts=2) is None
    second = _sent(call, "b")
    assert call.tried == ["a", "b"]
    settled = call.settle_request()  # the success's per-attempt hook
    assert [(s.attempt, s.verdict.kind) for s in settled] == [(first, FailureKind.PROVIDER)] and call.pending is None
    assert call.learn(first, settled[0].outcome) == (None, False)  # a failure: neither served nor finished
    assert first.state is AttemptState.LEARNED and call.phase is Phase.ROUTING
    served, _ = call.learn(second, _ok("b"))
    assert served.deployment_id == "b" and call.phase is Phase.FINISHED


def test_a_pending_failure_is_learned_when_the_next_failure_differs():
    call = Call("auto/x", "r1", None, 0.0)
    first = _sent(call, "a")
    _fail(call, first, _provider_500("a"))
    second = _sent(call, "b")
    settled = _fail(call, second, Outcome("b", False, status_code=503, error_type=["ServiceUnavailableError"]))
    assert [s.attempt for s in settled] == [first] and call.pending.attempt is second


def test_the_same_failure_on_two_deployments_is_the_callers():
    call = Call("auto/x", "r1", None, 0.0)
    first = _sent(call, "a")
    assert _fail(call, first, _odd_500("a")) == [] and first.state is AttemptState.PENDING  # unproven
    second = _sent(call, "b")
    settled = _fail(call, second, _odd_500("b"))  # the deployment's name blanked out: the same failure
    # Both settled at once, neither counting: the pending one acquitted, this one the caller's.
    assert [(s.attempt, s.verdict.kind, s.verdict.counts) for s in settled] == \
        [(first, FailureKind.CLIENT, False), (second, FailureKind.CLIENT, False)]
    assert call.pending is None
    for s in settled:
        assert call.learn(s.attempt, s.outcome, s.verdict.counts) == (None, False)
    assert first.state is second.state is AttemptState.CALLERS
    assert call.caller_fault.status == 400 and "failed the same way on a and b" in call.caller_fault.message
    refusal = call.refusal(max_attempts=5)  # the filter's next pass answers the caller
    assert isinstance(refusal, Refused) and (refusal.status_code, refusal.tried) == (400, ["a", "b"])


def test_a_failure_on_a_second_provider_is_the_callers():
    call = Call("auto/x", "r1", None, 0.0)
    first = _sent(call, "a")
    _fail(call, first, _provider_500("a"), provider="openai")
    second = _sent(call, "b")
    settled = _fail(call, second, _provider_500("b"), provider="hosted_vllm")
    assert [(s.attempt, s.verdict.counts) for s in settled] == [(first, False), (second, False)]
    assert call.caller_fault is not None and call.refusal(max_attempts=5).status_code == call.caller_fault.status


def test_a_provider_side_failure_met_twice_stays_the_providers():
    call = Call("auto/x", "r1", None, 0.0)
    first = _sent(call, "a")
    _fail(call, first, _provider_500("a"))
    second = _sent(call, "b")
    assert [s.attempt for s in _fail(call, second, _provider_500("b"))] == [first]
    assert call.caller_fault is None and second.state is AttemptState.PENDING


def test_a_client_error_is_refused_as_the_callers_at_once():
    call = Call("auto/x", "r1", None, 0.0)
    attempt = _sent(call, "a")
    settled = _fail(call, attempt, _bad_request("a"))
    assert [(s.attempt, s.verdict.kind) for s in settled] == [(attempt, FailureKind.CLIENT)]
    assert not settled[0].verdict.counts and call.pending is None
    assert call.failures[-1].kind is FailureKind.CLIENT
    assert call.learn(attempt, _bad_request("a"), counts=False) == (None, False)
    assert attempt.state is AttemptState.CALLERS
    assert call.learn(attempt, _bad_request("a")) is None  # judged: never learned again


def test_a_stream_broken_after_its_answer_began_is_the_deployments():
    call = Call("auto/x", "r1", None, 0.0)
    attempt = _sent(call, "a")
    call.answer()
    broken = _odd_500("a")
    settled = _fail(call, attempt, broken)
    assert [(s.attempt, s.verdict.kind) for s in settled] == [(attempt, FailureKind.PROVIDER)]
    assert call.learn(attempt, broken) == (None, True) and call.phase is Phase.CLOSED


def test_an_alias_to_alias_fallback_settles_the_first_alias_pending_failure():
    first = Call("auto/x", "r1", None, 0.0)
    a = _sent(first, "a", )
    _fail(first, a, _provider_500("a"))
    branch = first.branches["auto/y"] = Call("auto/y", "r1", None, 0.0)
    first.decided(branch)
    assert first.current is branch and first.latest is branch
    first.decided(first)
    assert first.latest is None  # never a reference to itself (no cycle)
    first.decided(branch)
    b = _sent(branch, "b")
    _fail(branch, b, _provider_500("b"))
    c = _sent(branch, "c")
    settled = first.settle_request()  # c answered: both pending failures were their deployments'
    assert [(s.call, s.attempt) for s in settled] == [(first, a), (branch, b)]
    served, _ = branch.learn(c, _ok("c"))
    assert served.deployment_id == "c" and first.served is None
    assert (first.answer() | branch.answer()) is True  # the header hook marks both; the branch finished


def test_the_failure_hook_settles_a_pending_failure_and_answers_exhausted():
    call = Call("auto/x", "r1", None, 0.0)
    a = _sent(call, "a")
    _fail(call, a, _provider_500("a"))
    assert call.spent(max_attempts=0) and not call.spent(max_attempts=3)
    b = _sent(call, "b")
    # A rate limit does not count: settled at once; a's failure still waits for a proof.
    assert [s.attempt for s in _fail(call, b, Outcome("b", False, status_code=429, error_type=["RateLimitError"]))] \
        == [b]
    assert [s.attempt for s in call.settle_request()] == [a]
    exc = call.exhausted()
    assert exc.status_code == 502 and exc.tried == ["a", "b"]
    assert "a (500 InternalServerError), b (429 RateLimitError)" in exc.text
    assert call.refusal(max_attempts=1).kind == "aisia_all_candidates_failed"
    limited = Call("auto/x", "r2", None, 0.0)
    only = _sent(limited, "a")
    _fail(limited, only, Outcome("a", False, status_code=429, error_type=["RateLimitError"]))
    assert limited.exhausted().status_code == 429  # every failure a rate limit


def test_every_candidate_tried_is_spent():
    call = Call("auto/x", "r1", None, 0.0)
    call.decide(_decision("a"), ("a", "b"), {})
    call.send("a", 1.0)
    call.decide(_decision("b"), ("b",), {})
    call.send("b", 2.0)
    assert call.spent(None) and call.spent(9)


def test_a_choice_litellm_refused_and_the_next_ranked_sent():
    call = Call("auto/x", "r1", None, 0.0)
    attempt = _decided(call, "a")
    assert call.unsent() is attempt and call.refused_choices() == ["a"]
    assert call.send("z", 1.0) is None and attempt.state is AttemptState.DECIDED  # not one it offered
    assert call.send("b", 1.0) is attempt and attempt.deployment_id == "b"  # LiteLLM's checks dropped a
    assert call.unsent() is None and call.refused_choices() == []


def test_an_event_names_the_deployment_when_no_per_attempt_hook_ran():
    """A Router used alone: the logging event is the first to say where the attempt went."""
    call = Call("auto/x", "r1", None, 0.0)
    attempt = _decided(call, "a")
    assert call.sent_attempt("zz") is None
    assert call.sent_attempt("b") is attempt
    assert (attempt.state, attempt.deployment_id, attempt.started) == (AttemptState.SENT, "b", None)
    assert "served_by" not in attempt.explained
    assert call.sent_attempt("b") is attempt  # still unsettled: found again
    call.learn(attempt, _ok("b"))
    assert call.sent_attempt("b") is None


def test_illegal_transitions_are_refused():
    call = Call("auto/x", "r1", None, 0.0)
    attempt = _decided(call, "a")
    with pytest.raises(IllegalTransition):
        _fail(call, attempt, _provider_500("a"))  # never sent
    attempt.send("a", 1.0)
    with pytest.raises(IllegalTransition):
        attempt.send("a", 2.0)
    _fail(call, attempt, _provider_500("a"))
    with pytest.raises(IllegalTransition):
        _fail(call, attempt, _provider_500("a"))  # pending already
    call.answer()
    _decided(call, "b")  # answered: LiteLLM may still fall back (a stream failing midway)
    call.finish()
    with pytest.raises(IllegalTransition):
        _decided(call, "c")  # closed: nothing more is expected
    assert [s.value for s in AttemptState] == ["decided", "sent", "pending", "learned", "caller's"]
    assert [p.value for p in Phase] == ["routing", "answered", "finished", "closed"]


def test_the_error_the_failure_hook_answers():
    nothing = Call("auto/x", "r0", None, 0.0)
    assert nothing.final_error(False) is None  # no attempt failed: LiteLLM's error as it gave it
    exhausted = Call("auto/x", "r1", None, 0.0)
    _fail(exhausted, _sent(exhausted, "a"), _provider_500("a"))
    assert exhausted.final_error(True) is None  # LiteLLM's own refusal (cooldown, limits), as it gave it
    err = exhausted.final_error(False)
    assert (err.status_code, err.kind, err.tried) == (502, "aisia_all_candidates_failed", ["a"])
    client = Call("auto/x", "r2", None, 0.0)
    _fail(client, _sent(client, "a"), _bad_request("a"))
    assert client.final_error(False) is None  # the caller's own error: theirs to see as is
    twice = Call("auto/x", "r3", None, 0.0)
    _fail(twice, _sent(twice, "a"), _odd_500("a"))
    _fail(twice, _sent(twice, "b"), _odd_500("b"))
    err = twice.final_error(True)
    assert (err.status_code, err.kind, err.alias) == (400, "invalid_request_error", "auto/x")
