"""LiteLLM's own deployment selection, driven offline on a simulated clock.

``LiteLLMBaseline`` builds a real ``litellm.Router`` (1.108) over fake deployments, one per
candidate (a closed port: no HTTP call is made), asks it which deployment to pick for each replayed
request and feeds each outcome back through the functions the proxy's logging calls after an
attempt: selection, latency windows, cooldown decisions and expiry are LiteLLM's code. The Router is
built in this object's private event loop, and its callbacks are taken off LiteLLM's *global*
callback lists (``Router.discard``, ``_unregister_router_selectors``) and called directly: baselines,
or a plugin in the same process, never receive each other's events. ``STRATEGIES``: the three the
benchmarks compare (least-busy and usage-based need requests in flight or rpm/tpm limits).

``choose()``: ``Router.get_available_deployment`` (cooldown filter, then the strategy);
cost-based-routing has no synchronous selector and runs ``async_get_available_deployment`` (the
proxy's path) on the private loop.

``record()``: the callbacks an async proxy request dispatches, in order, with ``kwargs`` shaped like
``Logging.model_call_details`` and datetimes from the simulated clock. Success:
``Router.deployment_callback_on_success``, then the strategy's ``async_log_success_event``; without
rpm/tpm limits or pre-call checks the one counter that callback changes
(``increment_deployment_successes_for_current_minute``) is called directly, skipping a read-only
~0.5 ms model-info lookup (``exact_success_callback=True``: in full). Failure:
``deployment_callback_on_failure``, ``async_deployment_callback_on_failure``, the strategy's
``async_log_failure_event``, with the exception class LiteLLM maps the ``status_code`` to (429
``RateLimitError``, 503 ``ServiceUnavailableError``, 408 ``Timeout``...; default 500;
``retry_after_s`` as a header), so LiteLLM's own rules decide the cooldown.

Simulated clock: time ``t`` is the epoch ``CLOCK_EPOCH + t``, through the ``InMemoryCache``s'
``clock=`` hook and, once per process, shims for ``cooldown_cache.py``'s ``time`` and ``router.py``'s
``get_utc_datetime`` (the baseline's clock inside a call, the real one otherwise); with ``seed``,
the strategy modules' ``random`` draws from a private ``random.Random(seed)`` inside its calls.

Limits: ``lowest_latency.py``/``lowest_cost.py`` bucket rpm/tpm by the real ``datetime.now()``, read
only for limits these deployments do not set. No streaming, Redis, health checks, retries or
fallbacks. A price of exactly 0 is falsy for LiteLLM (its default of 5.0 per token applies: a free
candidate ranks last, as in a proxy). When every candidate cools down, ``choose`` raises
``NoDeploymentAvailable`` (the proxy's 429). The async path filters through the process-wide
``litellm.callbacks``: keep a plugin under test out of them. The shims are process-global: calls are
serialised by a lock; ``choose``/``record`` run the private loop to completion, so they are called
outside any running event loop (as the replays do)."""

from __future__ import annotations

import asyncio
import itertools
import random as _random_module
import threading
import time as _time_module
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from typing import Any, Callable

import bench  # noqa: F401 (LiteLLM offline: before its import)
import httpx
import litellm
import litellm.router as _router_module
import litellm.router_strategy.lowest_latency as _lowest_latency_module
import litellm.router_strategy.simple_shuffle as _simple_shuffle_module
import litellm.router_utils.cooldown_cache as _cooldown_cache_module
from litellm import Router
from litellm.router_utils.cooldown_handlers import get_cooldown_deployments
from litellm.router_utils.router_callbacks.track_deployment_metrics import (
    increment_deployment_successes_for_current_minute,
)
from litellm.types.router import RouterRateLimitError

from aisia_plugin.litellm.costs import quiet_litellm

STRATEGIES = ("simple-shuffle", "latency-based-routing", "cost-based-routing")
_ASYNC_ONLY = frozenset({"cost-based-routing"})  # LiteLLM has no synchronous selector for these
API_BASE = "http://127.0.0.1:9/v1"
MODEL_GROUP = "aisia-litellm-baseline"
CLOCK_EPOCH = 1_700_000_000.0


class NoDeploymentAvailable(RuntimeError):
    """LiteLLM found no deployment to serve the request (all cooling down): the proxy's 429."""

    def __init__(self, message: str, *, cooldown_ids=()):
        super().__init__(message)
        self.cooldown_ids = tuple(cooldown_ids)


# -- process-wide injection points: the active simulated clock and RNG (set only during a call) ---
_CALL_LOCK = threading.RLock()
_active_clock: Callable[[], float] | None = None
_active_rng: _random_module.Random | None = None


class _TimeShim:  # the ``time`` module inside litellm.router_utils.cooldown_cache
    def time(self) -> float:
        return _active_clock() if _active_clock is not None else _time_module.time()

    def __getattr__(self, name):
        return getattr(_time_module, name)


_real_utc_now = _router_module.get_utc_datetime


def _utc_now() -> datetime:  # ``get_utc_datetime`` in router.py, which buckets by minute
    return _real_utc_now() if _active_clock is None else datetime.fromtimestamp(_active_clock(), tz=timezone.utc)


class _RandomShim:  # the ``random`` module inside LiteLLM's strategy modules
    def __getattr__(self, name):
        return getattr(_active_rng if _active_rng is not None else _random_module, name)


_EXCEPTIONS_BY_STATUS = {
    400: litellm.BadRequestError, 401: litellm.AuthenticationError, 403: litellm.PermissionDeniedError,
    404: litellm.NotFoundError, 408: litellm.Timeout, 422: litellm.UnprocessableEntityError,
    429: litellm.RateLimitError, 500: litellm.InternalServerError, 502: litellm.BadGatewayError,
    503: litellm.ServiceUnavailableError,
}


def _provider_exception(status_code: int, model: str, retry_after_s: float | None) -> Exception:
    """The LiteLLM exception a provider error with ``status_code`` is mapped to."""
    headers = {"retry-after": f"{retry_after_s:g}"} if retry_after_s is not None else None
    request = httpx.Request("POST", f"{API_BASE}/chat/completions")
    response = httpx.Response(status_code, headers=headers, request=request)
    message, cls = f"simulated upstream error {status_code}", _EXCEPTIONS_BY_STATUS.get(status_code)
    if cls is litellm.Timeout:
        return litellm.Timeout(message=message, model=model, llm_provider="openai", headers=headers)
    if cls is litellm.RateLimitError:
        return cls(message=message, llm_provider="openai", model=model, response=response, headers=headers)
    if cls is None:
        exc = litellm.APIError(status_code=status_code, message=message, llm_provider="openai", model=model,
                               request=request)
        exc.response = response
        return exc
    return cls(message=message, llm_provider="openai", model=model, response=response)


class LiteLLMBaseline:
    """LiteLLM's own selection for one pool of candidates, driven offline."""

    def __init__(self, strategy: str, candidates: list[dict], seed: int | None = None, *,
                 cooldown_time: float | None = None, allowed_fails: int | None = None,
                 exact_success_callback: bool = False) -> None:
        """``candidates``: ``[{"id": "gpt-4o", "input_cost_per_1m": 2.5, "output_cost_per_1m": 10.0}, ...]``,
        with optional ``rpm``/``tpm``/``weight`` passed to LiteLLM. ``seed`` seeds LiteLLM's random
        draws (None: the global ``random``). ``cooldown_time``, ``allowed_fails``: passed to
        ``Router``."""
        ids = [str(c["id"]) for c in candidates]
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r} (one of {STRATEGIES})")
        if not ids or len(set(ids)) != len(ids) or MODEL_GROUP in ids:
            raise ValueError(f"candidate ids must be present, unique and not {MODEL_GROUP!r}")
        if not isinstance(_cooldown_cache_module.time, _TimeShim):  # the shims, once per process
            _cooldown_cache_module.time, _router_module.get_utc_datetime = _TimeShim(), _utc_now
            _simple_shuffle_module.random = _lowest_latency_module.random = _RandomShim()
        self.strategy = strategy
        self._async_selection = strategy in _ASYNC_ONLY
        self._now, self._call_ids, self._closed = 0.0, itertools.count(1), False
        self._rng = _random_module.Random(seed) if seed is not None else None
        self._response: Any = None
        self._prices: dict[str, tuple[float, float]] = {}
        model_list = []
        for c, cid in zip(candidates, ids):
            prices = {"input_cost_per_token": float(c.get("input_cost_per_1m", 0.0)) / 1e6,
                      "output_cost_per_token": float(c.get("output_cost_per_1m", 0.0)) / 1e6}
            self._prices[cid] = tuple(prices.values())
            params = {"model": f"openai/{cid}", "api_base": API_BASE, "api_key": "sk-fake", **prices,
                      **{k: c[k] for k in ("rpm", "tpm", "weight") if c.get(k) is not None}}
            model_list.append({"model_name": MODEL_GROUP, "litellm_params": params, "model_info": {"id": cid, **prices}})
        kwargs = {"routing_strategy": strategy, "routing_strategy_args": {}, "num_retries": 0, **{
            k: v for k, v in (("cooldown_time", cooldown_time), ("allowed_fails", allowed_fails)) if v is not None}}
        self._loop = asyncio.new_event_loop()

        async def build():
            with quiet_litellm("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
                built = Router(model_list=model_list, **kwargs)
            # tasks LiteLLM started for itself, which a call's drain must not wait for
            return built, frozenset(t for t in asyncio.all_tasks() if t is not asyncio.current_task())

        try:
            with self._activate():
                self.router, self._background_tasks = self._loop.run_until_complete(build())
        except BaseException:
            self._closed = True
            self._loop.close()
            raise
        router = self.router
        attr = Router._DEFAULT_SELECTOR_ATTR_BY_STRATEGY.get(strategy)
        self.selector = getattr(router, attr, None) if attr else None
        # Unhook from LiteLLM's process-wide callback lists; we dispatch to this router only.
        router._unregister_router_selectors([self.selector] if self.selector is not None else [])
        router.discard()
        for cache in (router.cache.in_memory_cache, router.cooldown_cache.in_memory_cache):
            if not callable(getattr(cache, "_clock", None)):
                raise RuntimeError("this litellm's InMemoryCache has no injectable _clock (written against 1.108)")
            cache._clock = self._sim_epoch_seconds
        # Deployment dicts as the Router stores them (what LiteLLM's callbacks would see).
        self._deployments = {str(d["model_info"]["id"]): d for d in router.get_model_list(model_name=MODEL_GROUP) or []}
        if self.selector is not None:  # latency- and cost-based: they count tokens and read each response's usage
            # LiteLLM's token_counter loads its tokenizer on first use (~0.7 s): here, not in a timed choose().
            with suppress(Exception):  # the strategies themselves fall back to 0 tokens
                litellm.token_counter(messages=[{"role": "user", "content": "warm up"}])
        has_limits = any(c.get(k) is not None for c in candidates for k in ("rpm", "tpm"))
        self._full_success_callback = bool(exact_success_callback or has_limits
                                           or getattr(router, "enable_pre_call_checks", False))
        if set(ids) - set(self._deployments):
            raise RuntimeError(f"LiteLLM did not register deployments {sorted(set(ids) - set(self._deployments))}")

    # -- clock / loop plumbing ------------------------------------------------------------------
    def _sim_epoch_seconds(self) -> float:
        return CLOCK_EPOCH + self._now

    @contextmanager
    def _activate(self, now: float | None = None):
        global _active_clock, _active_rng
        with _CALL_LOCK:
            if self._closed:
                raise RuntimeError("LiteLLMBaseline is closed")
            if now is not None:
                self._now = float(now)
            prev = _active_clock, _active_rng
            _active_clock, _active_rng = self._sim_epoch_seconds, self._rng
            try:
                yield
            finally:
                _active_clock, _active_rng = prev

    async def _drain(self) -> None:
        """Let the tasks LiteLLM scheduled during this call (cooldown event, service hooks) finish."""
        for _ in range(3):
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()
                       and t not in self._background_tasks and not t.done()]
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    # -- selection ------------------------------------------------------------------------------
    def choose(self, messages: list[dict], now: float) -> str:
        """The candidate id LiteLLM's strategy selects at simulated time ``now`` (cooling-down
        deployments excluded by LiteLLM; ``NoDeploymentAvailable`` when none is left)."""
        with self._activate(now):
            try:
                if self._async_selection:
                    async def pick():
                        try:
                            return await self.router.async_get_available_deployment(
                                model=MODEL_GROUP, request_kwargs={}, messages=messages)
                        finally:
                            await self._drain()

                    deployment = self._loop.run_until_complete(pick())
                else:
                    deployment = self.router.get_available_deployment(model=MODEL_GROUP, messages=messages,
                                                                      request_kwargs={})
            except RouterRateLimitError as e:
                raise NoDeploymentAvailable(str(e), cooldown_ids=getattr(e, "cooldown_list", ())) from e
        return str(deployment["model_info"]["id"])

    def set_price(self, cid: str, input_cost_per_1m: float, output_cost_per_1m: float) -> None:
        """A price update of one deployment in LiteLLM's Router (what a config reload would set)."""
        pin, pout = input_cost_per_1m / 1e6, output_cost_per_1m / 1e6
        deps = [d for d in (self.router.model_list or []) if str(d.get("model_info", {}).get("id")) == cid]
        for d in deps + [self._deployments[cid]]:
            for section in ("litellm_params", "model_info"):
                if isinstance(d.get(section), dict):
                    d[section].update(input_cost_per_token=pin, output_cost_per_token=pout)
        self._prices[cid] = (pin, pout)

    # -- feedback -------------------------------------------------------------------------------
    def record(self, candidate_id: str, *, now: float, latency_s: float, success: bool, input_tokens: int = 0,
               output_tokens: int = 0, cost_usd: float | None = None, status_code: int | None = None,
               retry_after_s: float | None = None) -> None:
        """Feed one attempt's outcome into LiteLLM (Router callbacks + strategy handler). ``now`` is
        when the outcome is observed (the attempt started at ``now - latency_s``); ``status_code``
        (failures only, default 500) selects the LiteLLM exception class."""
        cid = str(candidate_id)
        if cid not in self._deployments:
            raise KeyError(f"unknown candidate {candidate_id!r}")
        latency_s, now = max(0.0, float(latency_s)), float(now)
        tin, tout = max(0, int(input_tokens)), max(0, int(output_tokens))
        cost_usd = float(tin * self._prices[cid][0] + tout * self._prices[cid][1] if cost_usd is None else cost_usd)
        model = self._deployments[cid]["litellm_params"]["model"]
        # naive local datetimes, like the ``datetime.datetime.now()`` LiteLLM's client wrapper uses
        start_t = now - latency_s
        start_dt, end_dt = datetime.fromtimestamp(CLOCK_EPOCH + start_t), datetime.fromtimestamp(CLOCK_EPOCH + now)
        call_id = f"baseline-{next(self._call_ids)}"
        exception = None if success else _provider_exception(int(status_code or 500), model, retry_after_s)
        slo = {
            "id": call_id, "call_type": "acompletion", "stream": False, "status": "success" if success else "failure",
            "model": model, "model_id": cid, "model_group": MODEL_GROUP, "api_base": API_BASE,
            "custom_llm_provider": "openai", "prompt_tokens": tin, "completion_tokens": tout,
            "total_tokens": tin + tout, "response_cost": cost_usd, "response_time": latency_s,
            "startTime": CLOCK_EPOCH + start_t, "endTime": CLOCK_EPOCH + now, "completionStartTime": CLOCK_EPOCH + now,
            "hidden_params": {"litellm_model_name": model, "model_id": cid, "api_base": API_BASE, "response_cost": cost_usd},
            "metadata": {}, "error_str": None if success else str(exception),
            "error_information": None if success else {"error_code": str(getattr(exception, "status_code", "")),
                                                       "error_class": type(exception).__name__},
        }
        info = dict(self._deployments[cid]["model_info"])
        params = {"metadata": {"model_group": MODEL_GROUP, "deployment": model, "model_info": info, "api_base": API_BASE},
                  "model_info": info, "api_base": API_BASE, "custom_llm_provider": "openai", "acompletion": True}
        kwargs = {"model": cid, "litellm_params": params, "standard_logging_object": slo,
                  "call_type": "acompletion", "stream": False, "litellm_call_id": call_id, "response_cost": cost_usd,
                  "start_time": start_dt, "end_time": end_dt, "api_call_start_time": start_dt,
                  "completion_start_time": end_dt, "custom_llm_provider": "openai", "messages": None}
        router, selector, full = self.router, self.selector, self._full_success_callback
        response = None
        if success and (selector is not None or full):
            # One ModelResponse per baseline, its usage rewritten per record (building a new one
            # costs ~50 us); LiteLLM's handlers only read ``usage`` and keep no reference.
            if self._response is None:
                self._response = litellm.ModelResponse(model=model, usage=litellm.Usage())
            response = self._response
            response.model = model
            response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens = (
                tin, tout, tin + tout)
        if not success:
            kwargs["exception"] = kwargs["original_exception"] = exception

        async def dispatch():
            try:
                if success:
                    if full:
                        await router.deployment_callback_on_success(kwargs, response, start_dt, end_dt)
                    else:  # the only state that callback changes without rpm/tpm limits (module docstring)
                        increment_deployment_successes_for_current_minute(litellm_router_instance=router,
                                                                          deployment_id=cid)
                    if selector is not None:
                        await selector.async_log_success_event(kwargs, response, start_dt, end_dt)
                else:
                    router.deployment_callback_on_failure(kwargs, None, start_dt, end_dt)
                    await router.async_deployment_callback_on_failure(kwargs, None, start_dt, end_dt)
                    if selector is not None:
                        await selector.async_log_failure_event(kwargs, None, start_dt, end_dt)
            finally:
                await self._drain()

        with self._activate(now):
            self._loop.run_until_complete(dispatch())

    # -- introspection / lifecycle --------------------------------------------------------------
    def cooled_down(self, now: float | None = None) -> list[str]:
        """Candidate ids LiteLLM considers cooling down at ``now`` (default: last seen time)."""
        with self._activate(now):
            return [str(x) for x in get_cooldown_deployments(self.router, None)]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def shutdown():
            for task in asyncio.all_tasks() - {asyncio.current_task()}:
                task.cancel()
            await asyncio.sleep(0)

        try:
            self._loop.run_until_complete(shutdown())
        finally:
            self._loop.close()

    def __enter__(self) -> "LiteLLMBaseline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
