"""Circuit breaker (docs/design.md#circuit-breaker): exact transitions with an injected clock, failure
classification, and invariants under random sequences.

The configuration comes from the real policy loader on a minimal YAML (``version: 1``), so the
schema defaults are the ones under test: failure_threshold 5, timeout_s 60,
half_open_max_calls 3, failure_status_codes [500, 502, 503, 504, 529], rate_limit_cooldown_s 5,
max_retry_after_s 300.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aisia_plugin.breaker import (
    CLOSED, HALF_OPEN, OPEN, PROMETHEUS_CODE, BreakerState, CircuitBreaker, FailureKind,
    classify_exception, classify_failure, parse_retry_after,
)
from aisia_plugin.policy import load_policy
from aisia_plugin.state.records import read_breaker

T0 = 1_000.0


def _cfg(tmp_path, extra: str = ""):
    p = tmp_path / "p.yaml"
    p.write_text("version: 1\n" + extra, encoding="utf-8")
    return load_policy([p]).circuit_breaker  # layered over the shipped defaults


@pytest.fixture
def cfg(tmp_path):
    return _cfg(tmp_path)


@pytest.fixture
def cb(cfg):
    return CircuitBreaker(cfg)


def _fail(cb, s, n, now, kind=FailureKind.PROVIDER):
    for _ in range(n):
        s = cb.on_failure(s, now, kind)
    return s


def _opened(cb, now=T0):
    s = _fail(cb, BreakerState(), 5, now)
    assert s.state == OPEN
    return s


def test_schema_defaults_are_the_seed_parameters(cfg):
    assert cfg.failure_threshold == 5
    assert cfg.timeout_s == 60
    assert cfg.half_open_max_calls == 3
    assert PROMETHEUS_CODE == {CLOSED: 0, HALF_OPEN: 1, OPEN: 2}


# -- seed state diagram ---------------------------------------------------------------------
def test_four_failures_stay_closed_fifth_opens(cb):
    s = _fail(cb, BreakerState(), 4, T0)
    assert (s.state, s.failures, s.last_failure_time) == (CLOSED, 4, T0)
    assert cb.available(s, T0)
    s = cb.on_failure(s, T0 + 1)
    assert (s.state, s.failures, s.last_failure_time, s.success_count) == (OPEN, 5, T0 + 1, 0)
    assert not cb.available(s, T0 + 1)
    assert cb.metric_value(s, T0 + 1) == 2


def test_success_in_closed_decrements_net_failures(cb):
    # The seed says "consecutive" failures, but a CLOSED success only decrements the counter
    # (self-healing), so the threshold counts NET failures: 4 failures, 1 success, 1 failure
    # leaves 4, not 1, and the breaker is still CLOSED; one more failure opens it.
    s = _fail(cb, BreakerState(), 4, T0)
    s = cb.on_success(s, T0)
    assert (s.state, s.failures) == (CLOSED, 3)
    s = cb.on_failure(s, T0)
    assert (s.state, s.failures) == (CLOSED, 4)
    s = cb.on_failure(s, T0)
    assert (s.state, s.failures) == (OPEN, 5)


def test_success_never_drives_failures_negative(cb):
    s = BreakerState()
    for _ in range(10):
        s = cb.on_success(s, T0)
    assert s == BreakerState()
    s = cb.on_success(cb.on_failure(s, T0), T0)
    assert (s.state, s.failures) == (CLOSED, 0)


def test_open_times_out_strictly_after_timeout_s(cb):
    s = _opened(cb)
    assert cb.effective_state(s, T0 + 30) == OPEN
    assert cb.effective_state(s, T0 + 60) == OPEN  # seed: elapsed > timeout_s, so exactly 60 s is not enough
    assert not cb.available(s, T0 + 60)
    assert cb.reserve(s, T0 + 60) == (False, s)
    assert cb.effective_state(s, T0 + 60.001) == HALF_OPEN
    assert cb.available(s, T0 + 60.001)
    assert cb.metric_value(s, T0 + 60.001) == 1
    assert s.state == OPEN  # reading is pure: nothing stored changes until reserve/outcome


def test_reserve_performs_open_to_half_open(cb):
    s = _opened(cb)
    ok, h = cb.reserve(s, T0 + 61)
    assert ok
    assert (h.state, h.success_count, h.probes_in_flight) == (HALF_OPEN, 0, 1)
    assert h.failures == 5 and h.last_failure_time == T0  # the seed keeps them on the transition


def test_half_open_closes_after_exactly_three_successes(cb):
    s = _opened(cb)
    now = T0 + 61
    for _ in range(3):
        ok, s = cb.reserve(s, now)
        assert ok
    assert s.probes_in_flight == 3
    s = cb.on_success(s, now)
    assert (s.state, s.success_count, s.probes_in_flight) == (HALF_OPEN, 1, 2)
    s = cb.on_success(s, now)
    assert (s.state, s.success_count, s.probes_in_flight) == (HALF_OPEN, 2, 1)  # 2 is not enough
    s = cb.on_success(s, now)
    assert s == BreakerState(state=CLOSED, failures=0, last_failure_time=0.0, success_count=0,
                             probes_in_flight=0, probe_reserved_at=0.0)
    assert cb.available(s, now)


def test_success_on_open_past_timeout_counts_as_half_open(cb):
    s = _opened(cb)
    s = cb.on_success(s, T0 + 61)
    assert (s.state, s.success_count) == (HALF_OPEN, 1)
    s = cb.on_success(cb.on_success(s, T0 + 62), T0 + 63)
    assert s.state == CLOSED


def test_late_success_while_open_is_ignored(cb):
    s = _opened(cb)
    assert cb.on_success(s, T0 + 10) == s


def test_half_open_failure_reopens_with_new_timeout(cb):
    s = _opened(cb)
    ok, s = cb.reserve(s, T0 + 61)
    s = cb.on_success(s, T0 + 62)
    ok, s = cb.reserve(s, T0 + 63)
    assert ok and s.success_count == 1
    s = cb.on_failure(s, T0 + 70)
    assert (s.state, s.last_failure_time, s.success_count, s.probes_in_flight) == (OPEN, T0 + 70, 0, 0)
    # The new timeout runs from the failing probe, not from the original opening.
    assert cb.effective_state(s, T0 + 121) == OPEN
    assert cb.effective_state(s, T0 + 130) == OPEN
    assert cb.effective_state(s, T0 + 130.001) == HALF_OPEN


def test_failure_on_open_past_timeout_reopens(cb):
    s = _opened(cb)
    s = cb.on_failure(s, T0 + 61)
    assert (s.state, s.last_failure_time) == (OPEN, T0 + 61)
    assert cb.effective_state(s, T0 + 100) == OPEN


def test_failure_while_open_refreshes_last_failure_time(cb):
    s = _opened(cb)
    s2 = cb.on_failure(s, T0 + 30)
    assert (s2.state, s2.last_failure_time, s2.failures) == (OPEN, T0 + 30, 5)
    assert cb.effective_state(s2, T0 + 61) == OPEN


def test_at_most_three_probes_in_flight(cb):
    s = _opened(cb)
    now = T0 + 61
    for i in range(3):
        assert cb.available(s, now)
        ok, s = cb.reserve(s, now)
        assert ok and s.probes_in_flight == i + 1
    assert not cb.available(s, now)
    ok, s4 = cb.reserve(s, now)
    assert not ok and s4 == s  # the 4th is refused and changes nothing
    # Outcomes release slots: a success, a client error, a cancellation each free one.
    s = cb.on_success(s, now)
    assert s.probes_in_flight == 2 and cb.available(s, now)
    ok, s = cb.reserve(s, now)
    assert ok and s.probes_in_flight == 3
    s = cb.on_failure(s, now, FailureKind.CLIENT)
    assert (s.state, s.probes_in_flight, s.success_count) == (HALF_OPEN, 2, 1)
    s = cb.release(s)
    assert s.probes_in_flight == 1
    s = cb.release(cb.release(s))
    assert s.probes_in_flight == 0  # never below zero


def test_lost_probes_are_reclaimed_after_the_lease(cb):
    s = _opened(cb)
    now = T0 + 61
    for _ in range(3):
        _, s = cb.reserve(s, now)
    assert not cb.available(s, now + 60)  # the lease is max(timeout_s, 60 s) = 60 s
    assert cb.available(s, now + 60.5)
    ok, s = cb.reserve(s, now + 60.5)
    assert ok and s.probes_in_flight == 1


def test_closed_reserve_is_a_no_op(cb):
    s = _fail(cb, BreakerState(), 2, T0)
    assert cb.reserve(s, T0) == (True, s)


def test_states_are_immutable(cb):
    s = BreakerState()
    with pytest.raises(Exception):
        s.failures = 3  # type: ignore[misc]
    s2 = cb.on_failure(s, T0)
    assert s == BreakerState() and s2.failures == 1


def test_custom_thresholds_from_yaml(tmp_path):
    cfg = _cfg(tmp_path, "circuit_breaker:\n  failure_threshold: 2\n  timeout_s: 10\n  half_open_max_calls: 1\n")
    cb = CircuitBreaker(cfg)
    s = _fail(cb, BreakerState(), 2, T0)
    assert s.state == OPEN
    ok, s = cb.reserve(s, T0 + 10.5)
    assert ok and s.state == HALF_OPEN
    assert cb.reserve(s, T0 + 10.5)[0] is False
    assert cb.on_success(s, T0 + 11).state == CLOSED


# -- classification ---------------------------------------------------------------------------
@pytest.mark.parametrize("code", [500, 502, 503, 504, 529, 501, 599])
def test_server_errors_are_provider_faults(cfg, code):
    assert classify_failure(cfg, status_code=code) is FailureKind.PROVIDER


@pytest.mark.parametrize("name", ["Timeout", "APITimeoutError", "ReadTimeout", "ConnectTimeout", "TimeoutError",
                                  "litellm.exceptions.Timeout", "asyncio.TimeoutError"])
def test_timeouts(tmp_path, cfg, name):
    assert classify_failure(cfg, error_type=name) is FailureKind.PROVIDER
    assert classify_failure(cfg, status_code=408, error_type=name) is FailureKind.PROVIDER  # litellm.Timeout is 408
    off = _cfg(tmp_path, "circuit_breaker:\n  count_timeouts: false\n")
    assert classify_failure(off, error_type=name) is FailureKind.CLIENT
    assert classify_failure(off, status_code=408, error_type=name) is FailureKind.CLIENT


@pytest.mark.parametrize("name", ["APIConnectionError", "ConnectionError", "ConnectError", "ClientConnectorError",
                                  "ConnectionResetError", "RemoteProtocolError", "ServerDisconnectedError"])
def test_connection_errors(tmp_path, cfg, name):
    assert classify_failure(cfg, error_type=name) is FailureKind.PROVIDER
    # LiteLLM's APIConnectionError carries status 500: the switch must still apply.
    off = _cfg(tmp_path, "circuit_breaker:\n  count_connection_errors: false\n")
    assert classify_failure(off, status_code=500, error_type=name) is FailureKind.CLIENT
    assert classify_failure(off, error_type=name) is FailureKind.CLIENT


def test_timeout_switch_wins_over_connection_for_api_timeout(tmp_path):
    # openai.APITimeoutError subclasses APIConnectionError: as an MRO it is both.
    off = _cfg(tmp_path, "circuit_breaker:\n  count_timeouts: false\n")
    assert classify_failure(off, error_type=["Timeout", "APITimeoutError", "APIConnectionError"]) is FailureKind.CLIENT


@pytest.mark.parametrize("code", [400, 401, 403, 404, 413, 422])
def test_client_status_codes(cfg, code):
    assert classify_failure(cfg, status_code=code) is FailureKind.CLIENT


@pytest.mark.parametrize("kw", [
    dict(status_code=400, error_type="ContextWindowExceededError"),
    dict(error_type="ContextWindowExceededError"),
    dict(status_code=400, message="This model's maximum context length is 8192 tokens"),
    dict(status_code=500, message="Input exceeds the context length of the model"),
    dict(status_code=400, error_type="ContentPolicyViolationError"),
    dict(error_type="BadRequestError"),
    dict(error_type="AuthenticationError"),
    dict(error_type="PermissionDeniedError"),
    dict(error_type="NotFoundError"),
    dict(error_type="UnprocessableEntityError"),
])
def test_client_errors(cfg, kw):
    assert classify_failure(cfg, **kw) is FailureKind.CLIENT


@pytest.mark.parametrize("kw", [
    dict(status_code=400), dict(status_code=401), dict(status_code=403), dict(status_code=404),
    dict(status_code=413), dict(status_code=422), dict(status_code=400, error_type="ContextWindowExceededError"),
])
def test_client_errors_never_open_the_breaker(cb, cfg, kw):
    s = BreakerState()
    for i in range(100):
        kind = classify_failure(cfg, **kw)
        s = cb.on_failure(s, T0 + i, kind)
    assert s == BreakerState()
    assert cb.available(s, T0 + 100)


def test_unknown_failure_is_provider(cfg):
    # Conservative: a provider failing in a novel way must still be isolated (see the docstring).
    assert classify_failure(cfg) is FailureKind.PROVIDER
    assert classify_failure(cfg, error_type="WeirdSDKError", message="boom") is FailureKind.PROVIDER
    assert classify_failure(cfg, error_type="ServiceUnavailableError") is FailureKind.PROVIDER
    assert classify_failure(cfg, status_code=200, error_type="JSONDecodeError") is FailureKind.PROVIDER


def test_classify_exception_uses_mro_status_and_message(tmp_path, cfg):
    class APIConnectionError(Exception):
        status_code = 500

    class APITimeoutError(APIConnectionError):
        pass

    class Timeout(APITimeoutError):
        status_code = 408

    class BadRequestError(Exception):
        status_code = 400

    class RateLimitError(Exception):
        status_code = 429

    off = _cfg(tmp_path, "circuit_breaker:\n  count_timeouts: false\n")
    assert classify_exception(cfg, Timeout("timed out")) is FailureKind.PROVIDER
    assert classify_exception(off, Timeout("timed out")) is FailureKind.CLIENT
    assert classify_exception(off, APIConnectionError("refused")) is FailureKind.PROVIDER
    assert classify_exception(cfg, BadRequestError("bad")) is FailureKind.CLIENT
    assert classify_exception(cfg, RateLimitError("slow down")) is FailureKind.RATE_LIMIT
    assert classify_exception(cfg, ConnectionResetError()) is FailureKind.PROVIDER
    assert classify_exception(cfg, RuntimeError("?")) is FailureKind.PROVIDER


# -- rate limits ---------------------------------------------------------------------------------
def test_429_is_a_rate_limit(cfg):
    assert classify_failure(cfg, status_code=429) is FailureKind.RATE_LIMIT
    assert classify_failure(cfg, error_type="RateLimitError") is FailureKind.RATE_LIMIT


def test_rate_limit_honours_retry_after_and_is_not_a_failure(cb):
    s = _fail(cb, BreakerState(), 4, T0)
    s = cb.on_failure(s, T0, FailureKind.RATE_LIMIT, retry_after_s=20)
    assert (s.state, s.failures, s.rate_limits, s.rate_limited_until) == (CLOSED, 4, 1, T0 + 20)
    assert cb.is_rate_limited(s, T0 + 19.9) and not cb.available(s, T0 + 19.9)
    assert not cb.is_rate_limited(s, T0 + 20) and cb.available(s, T0 + 20)
    for i in range(50):  # many 429s never open the breaker
        s = cb.on_failure(s, T0 + i, FailureKind.RATE_LIMIT)
    assert (s.state, s.failures, s.rate_limits) == (CLOSED, 4, 51)


def test_rate_limit_default_cooldown_and_cap(cb):
    s = cb.on_failure(BreakerState(), T0, FailureKind.RATE_LIMIT)
    assert s.rate_limited_until == T0 + 5  # rate_limit_cooldown_s
    s = cb.on_failure(BreakerState(), T0, FailureKind.RATE_LIMIT, retry_after_s=86_400)
    assert s.rate_limited_until == T0 + 300  # capped by max_retry_after_s
    s = cb.on_failure(BreakerState(), T0, FailureKind.RATE_LIMIT, retry_after_s=float("nan"))
    assert s.rate_limited_until == T0 + 5
    # A shorter Retry-After does not cut an earlier, longer back-off short.
    s = cb.on_failure(cb.on_failure(BreakerState(), T0, FailureKind.RATE_LIMIT, 100), T0 + 1, FailureKind.RATE_LIMIT, 2)
    assert s.rate_limited_until == T0 + 100


def test_rate_limit_in_half_open_releases_the_probe_and_keeps_state(cb):
    s = _opened(cb)
    _, s = cb.reserve(s, T0 + 61)
    s = cb.on_failure(s, T0 + 62, FailureKind.RATE_LIMIT, retry_after_s=3)
    assert (s.state, s.probes_in_flight, s.rate_limited_until) == (HALF_OPEN, 0, T0 + 65)


def test_parse_retry_after():
    assert parse_retry_after(None) is None
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(b"1.5") == 1.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now_epoch=1445412480.0) == 30.0

# -- the stores' reader of a breaker (state/records.py) --------------------------------------------
# -- the stores' reader of a breaker (state/records.py) -------------------------------------------------------------------------------
def test_dict_round_trip_and_tolerant_reader(cb):
    s = cb.on_failure(_opened(cb), T0 + 1, FailureKind.RATE_LIMIT, 7)
    assert read_breaker(asdict(s)) == s
    redis_like = {b"state": b"OPEN", b"failures": b"5", b"last_failure_time": b"1000.5", b"success_count": b"0"}
    assert read_breaker(redis_like) == BreakerState(state=OPEN, failures=5, last_failure_time=1000.5)
    assert read_breaker({"state": "2"}).state == OPEN  # Prometheus code
    garbage = {"state": "MELTED", "failures": "lots", "last_failure_time": "nan", "success_count": -4,
               "probes_in_flight": None, "rate_limited_until": [1], "rate_limits": True, "extra": 1}
    assert read_breaker(garbage) == BreakerState()
    for raw in (None, 3, "x", [], {1: object()}):
        assert read_breaker(raw) == BreakerState()


# -- property --------------------------------------------------------------------------------------
_ops = st.lists(st.one_of(
    st.just(("success",)), st.just(("provider",)), st.just(("client",)), st.just(("release",)),
    st.tuples(st.just("rate_limit"), st.one_of(st.none(), st.floats(-10, 1e6), st.just(float("nan")))),
    st.just(("reserve",)),
    st.tuples(st.just("advance"), st.floats(0, 200, allow_nan=False)),
), max_size=80)


_CFG_CACHE: dict = {}


@settings(max_examples=300, deadline=None)
@given(ops=_ops, threshold=st.integers(1, 6), max_calls=st.integers(1, 4), timeout=st.sampled_from([0.5, 1.0, 60.0]))
def test_invariants_under_random_sequences(tmp_path_factory, ops, threshold, max_calls, timeout):
    key = (threshold, max_calls, timeout)
    if key not in _CFG_CACHE:  # one real policy load per combination, not per example
        _CFG_CACHE[key] = _cfg(tmp_path_factory.mktemp("p"),
                               f"circuit_breaker:\n  failure_threshold: {threshold}\n"
                               f"  half_open_max_calls: {max_calls}\n  timeout_s: {timeout}\n")
    cfg = _CFG_CACHE[key]
    cb = CircuitBreaker(cfg)
    s, now = BreakerState(), T0
    for op in ops:
        name = op[0]
        if name == "success":
            s = cb.on_success(s, now)
        elif name == "provider":
            s = cb.on_failure(s, now, FailureKind.PROVIDER)
        elif name == "client":
            s = cb.on_failure(s, now, FailureKind.CLIENT)
        elif name == "rate_limit":
            s = cb.on_failure(s, now, FailureKind.RATE_LIMIT, op[1])
        elif name == "release":
            s = cb.release(s)
        elif name == "reserve":
            ok, s2 = cb.reserve(s, now)
            if ok:
                s = s2
            else:
                assert s2 == s
        else:
            now += op[1]
        assert s.state in (CLOSED, HALF_OPEN, OPEN)
        assert cb.effective_state(s, now) in (CLOSED, HALF_OPEN, OPEN)
        assert s.failures >= 0 and s.success_count >= 0 and s.rate_limits >= 0
        assert 0 <= s.probes_in_flight <= max_calls
        assert math.isfinite(s.rate_limited_until) and s.rate_limited_until <= now + 300
        if s.state == HALF_OPEN:
            assert s.success_count < max_calls
        if s.state == CLOSED:
            assert s.failures < threshold and s.probes_in_flight == 0
            if s.failures < threshold and not cb.is_rate_limited(s, now):
                assert cb.available(s, now)
        assert read_breaker(asdict(s)) == s
