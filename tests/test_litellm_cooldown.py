"""LiteLLM's own cooldown is spared a failed attempt the plugin does not hold against its
deployment (compat.litellm_cooldown_sees, docs/failures.md#litellms-own-cooldown), and still sees
one it does: checked on the installed LiteLLM's Router, whose failure callback
(``Router.deployment_callback_on_failure``) is given the attempt's logging kwargs as LiteLLM's
failure handler gives them. No request is sent: a 429 in a group of two deployments is one
LiteLLM cools at once (``cooldown_handlers._should_cooldown_deployment``)."""

from __future__ import annotations

import asyncio

import litellm
import pytest

from aisia_plugin.litellm import compat


class LoggingObject:
    """What the per-attempt failure hook reads of LiteLLM's logging object."""

    def __init__(self, params: dict):
        self.model_call_details = {"litellm_params": params}


def router() -> litellm.Router:
    models = [{"model_name": "g", "litellm_params": {"model": f"openai/m-{n}", "api_key": "sk-x",
                                                     "api_base": "http://127.0.0.1:9/v1"},
               "model_info": {"id": n}} for n in ("a", "b")]
    return litellm.Router(model_list=models)


def rate_limited() -> Exception:
    return litellm.RateLimitError(message="slow down", llm_provider="openai", model="m-a")


def attempt_kwargs(exception, params: dict) -> dict:
    return {"exception": exception, "litellm_params": params}


def fail(r: litellm.Router, kwargs: dict) -> bool:
    async def run():  # (the cooldown callback schedules a task: a running loop)
        cooled = r.deployment_callback_on_failure(kwargs, None, None, None)
        await asyncio.sleep(0)
        return cooled
    return asyncio.run(run())


def cooled(r: litellm.Router) -> list:
    from litellm.router_utils.cooldown_handlers import get_cooldown_deployments
    return get_cooldown_deployments(r, None)


def params() -> dict:
    return {"model_info": {"id": "a"}, "metadata": {"model_group": "g"}}


def test_the_attempts_cooldown_set_to_zero_spares_the_deployment_and_a_counted_failure_cools_it():
    r = router()
    spared = params()
    assert compat.litellm_cooldown_sees({"litellm_logging_obj": LoggingObject(spared)}, rate_limited(), False)
    assert spared["cooldown_time"] == 0
    assert fail(r, attempt_kwargs(rate_limited(), spared)) is False
    assert cooled(r) == []
    # The same failure seen (a provider's): LiteLLM cools the deployment as it would.
    seen = params()
    compat.litellm_cooldown_sees({"litellm_logging_obj": LoggingObject(seen)}, rate_limited(), True)
    assert "cooldown_time" not in seen
    assert fail(r, attempt_kwargs(rate_limited(), seen)) is True
    assert cooled(r) == ["a"]


def test_a_later_attempt_that_counts_gets_the_attempts_own_cooldown_time_back():
    shared = {**params(), "cooldown_time": 30}  # the deployment's own (litellm_params.cooldown_time)
    obj = {"litellm_logging_obj": LoggingObject(shared)}
    compat.litellm_cooldown_sees(obj, None, False)
    assert shared["cooldown_time"] == 0
    compat.litellm_cooldown_sees(obj, None, True)
    assert shared["cooldown_time"] == 30 and compat._SAVED_COOLDOWN not in shared


@pytest.mark.skipif(compat.COOLDOWN_MARKER is None, reason="this LiteLLM has no such mark")
def test_a_streams_failure_event_marks_the_live_exception_which_litellm_neither_counts_nor_cools():
    r = router()
    exc = rate_limited()
    event = attempt_kwargs(exc, params())  # a logging event's kwargs are its model_call_details
    assert compat.litellm_cooldown_sees(event, exc, False)
    assert fail(r, event) is False
    assert cooled(r) == []


# -- which failures LiteLLM's cooldown is spared (Runtime.spares_cooldown) ----------------------
POLICY = """\
version: 1
defaults: false
aliases:
  t/all:
    strategy: cost
    candidates: {models: [d-a, d-b]}
"""


def runtime(tmp_path):
    from aisia_plugin.litellm.runtime import Runtime
    from aisia_plugin.policy.loader import load_policy_with_locations
    from aisia_plugin.state.memory import MemoryState

    (tmp_path / "policy.yaml").write_text(POLICY)
    return Runtime(load_policy_with_locations([tmp_path / "policy.yaml"]), store=MemoryState())


def failed_call(rt, status: int, error_type: str, facts=None, key: str = "key-a"):
    """A call of `key` whose one attempt on d-a failed as given, judged by Call.fail."""
    from aisia_plugin import blame
    from aisia_plugin.decision import Decision
    from aisia_plugin.litellm.lifecycle import Call
    from aisia_plugin.outcome import Outcome

    call = Call("t/all", "r1", None, 0.0, key=key)
    attempt = call.decide(Decision.__new__(Decision), ("d-a", "d-b"), {})
    attempt.send("d-a", 0.0)
    failure = blame.AttemptFailure("d-a", "openai", status, error_type, "failed", ("x",), 1.0)
    call.fail(attempt, Outcome.__new__(Outcome), failure, rt.policy.circuit_breaker, facts or blame.NO_FACTS)
    return call


def test_litellm_sees_the_providers_failure_and_is_spared_the_callers_and_a_key_outliers(tmp_path, monkeypatch):
    from aisia_plugin import blame
    from aisia_plugin.litellm import lifecycle

    monkeypatch.setattr(lifecycle, "describe_failure", lambda outcome: "failed")
    rt = runtime(tmp_path)
    assert rt.spares_cooldown(failed_call(rt, 408, "Timeout", blame.RequestFacts(client_timeout=True))) is True
    assert rt.spares_cooldown(failed_call(rt, 500, "InternalServerError")) is False  # the provider's: seen
    assert rt.spares_cooldown(failed_call(rt, 429, "RateLimitError")) is False  # a rate limit: seen
    now = rt.store.clock()
    for _ in range(6):  # another key's calls to d-a are served
        rt.store.note_peer_call("d-a", "key-b", True, now, rt.outlier)
    assert rt.spares_cooldown(failed_call(rt, 500, "InternalServerError")) is True  # key-a's alone
    assert rt.spares_cooldown(failed_call(rt, 500, "InternalServerError", key="key-b")) is False


def test_the_runtime_tells_litellm_before_its_callback_and_says_so_once(tmp_path, monkeypatch, caplog):
    from aisia_plugin import blame
    from aisia_plugin.litellm import lifecycle

    monkeypatch.setattr(lifecycle, "describe_failure", lambda outcome: "failed")
    rt = runtime(tmp_path)
    caplog.set_level("INFO", logger="aisia_plugin.litellm")
    for _ in range(2):
        event = {"litellm_params": params(), "exception": rate_limited()}  # a failure event's kwargs
        rt.tell_cooldown(failed_call(rt, 408, "Timeout", blame.RequestFacts(client_timeout=True)), event)
        assert event["litellm_params"]["cooldown_time"] == 0
    provider = {"litellm_params": params()}
    rt.tell_cooldown(failed_call(rt, 500, "InternalServerError"), provider)
    assert "cooldown_time" not in provider["litellm_params"]
    assert sum("LiteLLM's cooldown is spared" in r.getMessage() for r in caplog.records) == 1
