"""`x-aisia-reason` says when a choice rests on the declared prior alone (docs/quality.md): a
strategy that ranks on quality chose a deployment about which no signal, judge's grade or
feedback was recorded yet; once evidence about it arrives the reason stops saying so, and a
strategy that does not rank on quality (cost) never says it."""

from __future__ import annotations

from aisia_plugin.decision import Decision
from aisia_plugin.engine import Engine
from aisia_plugin.litellm import headers
from aisia_plugin.litellm.lifecycle import Attempt, Call
from aisia_plugin.policy import load_policy
from aisia_plugin.state.memory import MemoryState


def _reason(engine, strategy: str, verbose: bool = False, domain: str = "coding") -> str:
    d = Decision("dep-1", None, strategy, "best of 2", 2, 0.9, alias="auto", domain=domain)
    attempt = Attempt(d, ("dep-1", "dep-2"), {}, deployment_id="dep-1")
    return headers.response_headers(Call("auto", "rid-1", None, 0.0), attempt, verbose, engine)["x-aisia-reason"]


def test_the_reason_says_when_the_choice_rests_on_the_prior_alone():
    engine = Engine(load_policy(), clock=lambda: 0.0, store=MemoryState())
    assert _reason(engine, "contextual") == f"contextual picked dep-1 of 2 candidates, {headers.PRIOR_ONLY}"
    assert _reason(engine, "contextual", verbose=True) == f"best of 2; dep-1 chosen {headers.PRIOR_ONLY}"
    assert headers.PRIOR_ONLY not in _reason(engine, "cost")  # it ranks on price, not on quality
    assert headers.PRIOR_ONLY not in _reason(None, "ucb1")  # no engine given: nothing claimed
    # Evidence about another deployment says nothing of dep-1: still the prior alone.
    engine.record_quality("dep-2", "auto", "coding", 1.0, "feedback")
    assert headers.PRIOR_ONLY in _reason(engine, "ucb1")
    engine.record_quality("dep-1", "auto", "coding", 0.0, "signal")  # a complaint about dep-1's answer
    assert _reason(engine, "contextual") == "contextual picked dep-1 of 2 candidates"
    assert headers.PRIOR_ONLY not in _reason(engine, "ucb1", verbose=True)
