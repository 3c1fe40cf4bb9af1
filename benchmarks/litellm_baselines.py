"""LiteLLM's own deployment selection, driven offline on a simulated clock.

``LiteLLMBaseline`` builds a real ``litellm.Router`` (1.108.0) over fake deployments, one per
candidate, asks it which deployment to pick for each replayed request, and feeds each outcome back
into the Router and its strategy handler through the functions the proxy's logging calls after a
real attempt. Nothing is reimplemented: selection, latency windows, cooldown decisions and expiry
are LiteLLM's code. No HTTP call is made (the deployments point at a closed port). Paths below are
relative to ``site-packages/litellm``.

Construction: ``router.py`` ``Router.__init__`` (strategy handler, ``CooldownCache``), inside this
object's private event loop (``BaseRoutingStrategy.setup_sync_task`` would otherwise install a
global one). The Router's callbacks are then removed from LiteLLM's *global* callback lists
(``Router.discard``, ``Router._unregister_router_selectors``) and called directly, so that
several baselines, or a plugin in the same process, never receive each other's events.

Selection, ``choose()``: ``Router.get_available_deployment`` (cooldown filter, then the strategy:
``simple_shuffle``, ``LowestLatencyLoggingHandler``, ``LeastBusyLoggingHandler``,
``LowestTPMLoggingHandler_v2``); cost-based-routing has no synchronous selector, so it runs
``Router.async_get_available_deployment`` (the proxy's path) on the private loop
(``selection_path="async"`` forces that path for all). Then what the proxy does before sending:
least-busy's ``log_pre_api_call`` (in-flight +1), usage-based-routing-v2's ``pre_call_check``.

Feedback, ``record()``: the callbacks an async proxy request dispatches, in order, with ``kwargs``
shaped like ``Logging.model_call_details`` and datetimes from the simulated clock. Success:
``Router.deployment_callback_on_success`` (the per-minute success counter of the cooldown rule),
then the strategy's ``async_log_success_event``; when no candidate sets rpm/tpm and pre-call
checks are off, the counter function it would call
(``increment_deployment_successes_for_current_minute``) is called directly, skipping a read-only
~0.5 ms model-info lookup (``exact_success_callback=True`` calls it in full). Failure:
``Router.deployment_callback_on_failure`` (cooldown decision, inside the loop), then
``async_deployment_callback_on_failure``, then the strategy's ``async_log_failure_event``.
``status_code`` picks the exception class LiteLLM maps a provider error to (429
``RateLimitError``, 503 ``ServiceUnavailableError``, 408 ``Timeout``...; default 500), so LiteLLM's
own rules decide the cooldown (``retry_after_s`` is sent as a ``retry-after`` header).

Simulated clock: time ``t`` is the epoch ``clock_epoch + t``. The Router's ``InMemoryCache``s take
it through their ``clock=`` hook (per instance); ``router_utils/cooldown_cache.py``'s ``time``
module and the ``get_utc_datetime`` of ``router.py`` and ``lowest_tpm_rpm_v2.py`` are replaced,
once per process, by shims that read the simulated clock of the baseline inside a call and the
real one otherwise; with ``seed`` set, the ``random`` of the strategy modules is a shim drawing
from a private ``random.Random(seed)`` inside this baseline's calls. Latency handed to LiteLLM is
``end - start`` with ``end = now``.

Limits: ``lowest_latency.py``/``lowest_cost.py`` bucket rpm/tpm by the real ``datetime.now()``,
read only for rpm/tpm limits these deployments do not set. Streaming is not modelled. LiteLLM's
latency handler divides by ``completion_tokens`` when the response has usage (feed tokens
consistently). cost-based-routing ranks by the deployment's per-token prices; a price of exactly 0
is falsy for LiteLLM, which then uses its default of 5.0 per token (a free candidate ranks last,
as in a proxy). least-busy with a strictly sequential replay always returns the first healthy
deployment. No Redis, health checks, retries or fallbacks; when every candidate cools down,
``choose`` raises ``NoDeploymentAvailable`` (the proxy's 429). The async path filters through the
process-wide ``litellm.callbacks``: keep a plugin under test out of them in a replay process.
Building the Router registers each deployment's pricing in ``litellm.model_cost`` under its id.
The shims are process-global: calls are serialised by a lock; ``choose``/``record`` may run
inside an event loop (the private loop then moves to a helper thread)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random as _random_module
import threading
import time as _time_module
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Final

import bench  # noqa: F401 (LiteLLM offline: before its import)
import httpx
import litellm
import litellm.router as _litellm_router_module
import litellm.router_strategy.lowest_latency as _lowest_latency_module
import litellm.router_strategy.lowest_tpm_rpm_v2 as _lowest_tpm_v2_module
import litellm.router_strategy.simple_shuffle as _simple_shuffle_module
import litellm.router_utils.cooldown_cache as _cooldown_cache_module
from litellm import Router
from litellm.router_utils.cooldown_handlers import get_cooldown_deployments
from litellm.router_utils.router_callbacks.track_deployment_metrics import (
    increment_deployment_successes_for_current_minute,
)
from litellm.types.router import RouterRateLimitError

__all__ = ["LiteLLMBaseline", "NoDeploymentAvailable", "STRATEGIES", "API_BASE", "MODEL_GROUP"]

STRATEGIES: Final = ("simple-shuffle", "latency-based-routing", "cost-based-routing", "least-busy",
                     "usage-based-routing-v2")
_ASYNC_ONLY: Final = frozenset({"cost-based-routing"})  # LiteLLM has no synchronous selector for these
# strategies whose selection calls ``litellm.token_counter`` on the request's messages
_TOKEN_COUNTING: Final = frozenset({"latency-based-routing", "cost-based-routing", "usage-based-routing-v2"})
API_BASE: Final = "http://127.0.0.1:9/v1"
MODEL_GROUP: Final = "aisia-litellm-baseline"
DEFAULT_CLOCK_EPOCH: Final = 1_700_000_000.0
_LITELLM_LOGGERS: Final = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
_get_running_loop: Final = asyncio.events._get_running_loop  # the running loop or None, never raising


class NoDeploymentAvailable(RuntimeError):
    """LiteLLM found no deployment to serve the request (all cooling down): the proxy's 429."""

    def __init__(self, message: str, *, cooldown_time: float | None, cooldown_ids: Sequence[str]):
        super().__init__(message)
        self.cooldown_time = cooldown_time
        self.cooldown_ids = tuple(cooldown_ids)


# -- process-wide injection points: the active simulated clock and RNG (set only during a call) ---
_CALL_LOCK: Final = threading.RLock()
_active_clock: Callable[[], float] | None = None
_active_rng: _random_module.Random | None = None


class _TimeModuleShim:
    """Stands in for the ``time`` module inside ``litellm.router_utils.cooldown_cache``."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def time(self) -> float:
        clock = _active_clock
        return clock() if clock is not None else self._real.time()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _UtcNowShim:
    """Stands in for ``litellm.utils.get_utc_datetime`` in the modules that bucket by minute."""

    def __init__(self, real: Callable[[], datetime]) -> None:
        self._real = real

    def __call__(self) -> datetime:
        clock = _active_clock
        return self._real() if clock is None else datetime.fromtimestamp(clock(), tz=timezone.utc)


class _RandomModuleShim:
    """Stands in for the ``random`` module inside LiteLLM's strategy modules."""

    def __getattr__(self, name: str) -> Any:
        rng = _active_rng
        return getattr(rng if rng is not None else _random_module, name)


_shims_installed = False


def _install_shims() -> None:
    global _shims_installed
    if _shims_installed:
        return
    if not isinstance(_cooldown_cache_module.time, _TimeModuleShim):
        _cooldown_cache_module.time = _TimeModuleShim(_time_module)  # type: ignore[assignment]
    for module in (_lowest_tpm_v2_module, _litellm_router_module):
        current = getattr(module, "get_utc_datetime", None)
        if current is not None and not isinstance(current, _UtcNowShim):
            module.get_utc_datetime = _UtcNowShim(current)  # type: ignore[attr-defined]
    for module in (_simple_shuffle_module, _lowest_latency_module, _lowest_tpm_v2_module):
        if not isinstance(getattr(module, "random", None), _RandomModuleShim):
            module.random = _RandomModuleShim()  # type: ignore[attr-defined]
    _shims_installed = True


@contextmanager
def _quiet_litellm() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _LITELLM_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


_EXCEPTIONS_BY_STATUS: Final[Mapping[int, Any]] = {
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
    message = f"simulated upstream error {status_code}"
    cls = _EXCEPTIONS_BY_STATUS.get(status_code)
    if cls is litellm.Timeout:
        return litellm.Timeout(message=message, model=model, llm_provider="openai", headers=headers)
    if cls is litellm.RateLimitError:
        return litellm.RateLimitError(message=message, llm_provider="openai", model=model, response=response,
                                      headers=headers)
    if cls is None:
        exc: Exception = litellm.APIError(status_code=status_code, message=message, llm_provider="openai",
                                          model=model, request=request)
        exc.response = response  # type: ignore[attr-defined]
        return exc
    if cls in (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.InternalServerError,
               litellm.ServiceUnavailableError, litellm.BadGatewayError):
        return cls(message=message, llm_provider="openai", model=model, response=response)
    return cls(message=message, model=model, llm_provider="openai", response=response)


class LiteLLMBaseline:
    """LiteLLM's own selection for one pool of candidates, driven offline."""

    def __init__(self, strategy: str, candidates: list[dict], seed: int | None = None, *,
                 cooldown_time: float | None = None, allowed_fails: int | None = None,
                 routing_strategy_args: dict | None = None, router_kwargs: dict | None = None,
                 selection_path: str = "auto", clock_epoch: float = DEFAULT_CLOCK_EPOCH,
                 exact_success_callback: bool = False) -> None:
        """``candidates``: ``[{"id": "gpt-4o", "input_cost_per_1m": 2.5, "output_cost_per_1m": 10.0}, ...]``,
        with optional ``rpm``/``tpm``/``weight``/``cooldown_time`` passed to LiteLLM. ``seed`` seeds
        LiteLLM's random draws (None: the global ``random``). ``cooldown_time``, ``allowed_fails``,
        ``routing_strategy_args``, ``router_kwargs``: passed to ``Router``. ``selection_path``:
        ``"auto"`` (sync where LiteLLM has a sync selector), ``"sync"`` or ``"async"``.
        ``clock_epoch``: the epoch seconds of simulated time 0."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
        if selection_path not in ("auto", "sync", "async"):
            raise ValueError("selection_path must be 'auto', 'sync' or 'async'")
        if selection_path == "sync" and strategy in _ASYNC_ONLY:
            raise ValueError(f"LiteLLM has no synchronous selector for {strategy!r}")
        if not candidates:
            raise ValueError("candidates must not be empty")
        ids = [str(c["id"]) for c in candidates]
        if len(set(ids)) != len(ids):
            raise ValueError("candidate ids must be unique")
        if MODEL_GROUP in ids:
            raise ValueError(f"candidate id {MODEL_GROUP!r} is reserved for the model group")

        _install_shims()
        self.strategy: Final = strategy
        self.candidate_ids: Final[tuple[str, ...]] = tuple(ids)
        self._use_async_selection: Final = selection_path == "async" or (
            selection_path == "auto" and strategy in _ASYNC_ONLY)
        self._epoch: Final = float(clock_epoch)
        self._now = 0.0
        self._rng = _random_module.Random(seed) if seed is not None else None
        self._call_ids = itertools.count(1)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self._prices: dict[str, tuple[float, float]] = {}
        model_list = []
        for c, cid in zip(candidates, ids):
            in_tok, out_tok = float(c.get("input_cost_per_1m", 0.0)) / 1e6, float(c.get("output_cost_per_1m", 0.0)) / 1e6
            self._prices[cid] = (in_tok, out_tok)
            litellm_params: dict[str, Any] = {"model": f"openai/{cid}", "api_base": API_BASE, "api_key": "sk-fake",
                                              "input_cost_per_token": in_tok, "output_cost_per_token": out_tok}
            litellm_params.update({k: c[k] for k in ("rpm", "tpm", "weight") if c.get(k) is not None})
            model_info: dict[str, Any] = {"id": cid, "input_cost_per_token": in_tok, "output_cost_per_token": out_tok}
            if c.get("cooldown_time") is not None:
                model_info["cooldown_time"] = c["cooldown_time"]
            model_list.append({"model_name": MODEL_GROUP, "litellm_params": litellm_params, "model_info": model_info})

        kwargs: dict[str, Any] = dict(router_kwargs or {})
        kwargs["routing_strategy"] = strategy
        kwargs.setdefault("routing_strategy_args", dict(routing_strategy_args or {}))
        if cooldown_time is not None:
            kwargs.setdefault("cooldown_time", cooldown_time)
        if allowed_fails is not None:
            kwargs.setdefault("allowed_fails", allowed_fails)
        kwargs.setdefault("num_retries", 0)
        self._loop = asyncio.new_event_loop()

        async def build() -> tuple[Router, frozenset[asyncio.Task]]:
            with _quiet_litellm():
                built = Router(model_list=model_list, **kwargs)
            # tasks LiteLLM started for itself (usage-based-routing-v2's periodic Redis sync)
            return built, frozenset(t for t in asyncio.all_tasks() if t is not asyncio.current_task())

        try:
            with self._activate():
                router, self._background_tasks = self._run(build())
        except BaseException:
            self._closed = True
            if self._thread is None:
                self._loop.close()
            raise
        self.router: Router = router
        for cache in (router.cache.in_memory_cache, router.cooldown_cache.in_memory_cache):
            if not callable(getattr(cache, "_clock", None)):
                raise RuntimeError("this litellm version's InMemoryCache has no injectable _clock; "
                                   "LiteLLMBaseline was written against litellm 1.108.0")
        attr = Router._DEFAULT_SELECTOR_ATTR_BY_STRATEGY.get(strategy)
        self.selector = getattr(router, attr, None) if attr else None
        # Unhook from LiteLLM's process-wide callback lists; we dispatch to this router only.
        router._unregister_router_selectors([self.selector] if self.selector is not None else [])
        router.discard()
        router.cache.in_memory_cache._clock = router.cooldown_cache.in_memory_cache._clock = self._sim_epoch_seconds
        # Deployment dicts as the Router stores them (what LiteLLM's callbacks would see).
        self._deployments: dict[str, dict] = {str(dep["model_info"]["id"]): dep
                                              for dep in router.get_model_list(model_name=MODEL_GROUP) or []}
        if strategy in _TOKEN_COUNTING:
            # LiteLLM's token_counter loads its tokenizer on first use (~0.7 s): here, not in a timed choose().
            try:
                litellm.token_counter(messages=[{"role": "user", "content": "warm up"}])
            except Exception:  # noqa: BLE001 - the strategies themselves fall back to 0 tokens
                pass
        has_limits = any(c.get(k) is not None for c in candidates for k in ("rpm", "tpm"))
        self._full_success_callback: Final = bool(
            exact_success_callback or has_limits or getattr(router, "enable_pre_call_checks", False))
        self._selector_reads_response: Final = strategy in ("latency-based-routing", "cost-based-routing")
        missing = set(ids) - set(self._deployments)
        if missing:
            raise RuntimeError(f"LiteLLM did not register deployments {sorted(missing)}")

    # -- clock / loop plumbing ------------------------------------------------------------------
    def _sim_epoch_seconds(self) -> float:
        return self._epoch + self._now

    def _sim_datetime(self, t: float) -> datetime:
        # naive local datetime, like the ``datetime.datetime.now()`` LiteLLM's client wrapper uses
        return datetime.fromtimestamp(self._epoch + t)

    @contextmanager
    def _activate(self, now: float | None = None) -> Iterator[None]:
        global _active_clock, _active_rng
        with _CALL_LOCK:
            if now is not None:
                self._now = float(now)
            prev_clock, prev_rng = _active_clock, _active_rng
            _active_clock, _active_rng = self._sim_epoch_seconds, self._rng
            try:
                yield
            finally:
                _active_clock, _active_rng = prev_clock, prev_rng

    def _run(self, coro: Any) -> Any:
        """Run a coroutine on the private loop (directly, or on its helper thread)."""
        if self._thread is None:
            if _get_running_loop() is None:
                return self._loop.run_until_complete(coro)
            self._start_loop_thread()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _run_sync(self, fn: Callable[[], Any]) -> Any:
        if self._thread is None:
            if _get_running_loop() is None:
                return fn()
            self._start_loop_thread()

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result()

    def _start_loop_thread(self) -> None:
        ready = threading.Event()

        def runner() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(ready.set)
            self._loop.run_forever()

        self._thread = threading.Thread(target=runner, name="litellm-baseline-loop", daemon=True)
        self._thread.start()
        ready.wait()

    async def _drain(self) -> None:
        """Let the tasks LiteLLM scheduled during this call (cooldown event, service hooks) finish."""
        current = asyncio.current_task()
        for _ in range(3):
            pending = [t for t in asyncio.all_tasks()
                       if t is not current and t not in self._background_tasks and not t.done()]
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    # -- selection ------------------------------------------------------------------------------
    def _select(self, messages: list[dict]) -> dict:
        try:
            if self._use_async_selection:
                async def pick() -> dict:
                    try:
                        return await self.router.async_get_available_deployment(
                            model=MODEL_GROUP, request_kwargs={}, messages=messages)
                    finally:
                        await self._drain()

                return self._run(pick())
            return self._run_sync(lambda: self.router.get_available_deployment(
                model=MODEL_GROUP, messages=messages, request_kwargs={}))
        except RouterRateLimitError as e:
            raise NoDeploymentAvailable(str(e), cooldown_time=getattr(e, "cooldown_time", None),
                                        cooldown_ids=getattr(e, "cooldown_list", ())) from e

    def choose(self, messages: list[dict], now: float) -> str:
        """The candidate id LiteLLM's strategy selects at simulated time ``now`` (cooling-down
        deployments excluded by LiteLLM; ``NoDeploymentAvailable`` when none is left; with ``rpm``
        limits, usage-based-routing-v2's pre-call check can raise ``litellm.RateLimitError``)."""
        self._check_open()
        with self._activate(now):
            deployment = self._select(messages)
            self._after_selection(deployment, messages)
        return str(deployment["model_info"]["id"])

    def _after_selection(self, deployment: dict, messages: list[dict]) -> None:
        """What the proxy does with the pick before sending the request."""
        selector = self.selector
        if selector is None:
            return
        if self.strategy == "least-busy":
            cid = str(deployment["model_info"]["id"])
            kwargs = {"litellm_params": self._litellm_params(cid), "call_type": "acompletion"}
            self._run_sync(lambda: selector.log_pre_api_call(model=cid, messages=messages, kwargs=kwargs))
        elif self.strategy == "usage-based-routing-v2":
            self._run_sync(lambda: selector.pre_call_check(deployment))

    def selection_overhead_sample(self, messages: list[dict]) -> float:
        """Seconds one LiteLLM selection takes at the last simulated time, without side effects
        on the replay (no in-flight/rpm accounting, the seeded RNG stream is left untouched)."""
        self._check_open()
        rng_state = self._rng.getstate() if self._rng is not None else None
        with self._activate():
            t0 = time_perf()
            try:
                self._select(messages)
            finally:
                elapsed = time_perf() - t0
                if rng_state is not None:
                    self._rng.setstate(rng_state)  # type: ignore[union-attr]
        return elapsed

    # -- feedback -------------------------------------------------------------------------------
    def _litellm_params(self, cid: str) -> dict:
        dep = self._deployments[cid]
        model_info = dict(dep["model_info"])
        metadata = {"model_group": MODEL_GROUP, "deployment": dep["litellm_params"]["model"], "model_info": model_info,
                    "api_base": API_BASE}
        return {"metadata": metadata, "model_info": model_info, "api_base": API_BASE, "custom_llm_provider": "openai",
                "acompletion": True}

    def record(self, candidate_id: str, *, now: float, latency_s: float, success: bool, input_tokens: int = 0,
               output_tokens: int = 0, cost_usd: float | None = None, status_code: int | None = None,
               retry_after_s: float | None = None) -> None:
        """Feed one attempt's outcome into LiteLLM (Router callbacks + strategy handler). ``now`` is
        when the outcome is observed (the attempt started at ``now - latency_s``); ``status_code``
        (failures only, default 500) selects the LiteLLM exception class."""
        self._check_open()
        cid = str(candidate_id)
        if cid not in self._deployments:
            raise KeyError(f"unknown candidate {candidate_id!r}")
        latency_s = max(0.0, float(latency_s))
        input_tokens, output_tokens = max(0, int(input_tokens)), max(0, int(output_tokens))
        if cost_usd is None:
            in_price, out_price = self._prices[cid]
            cost_usd = input_tokens * in_price + output_tokens * out_price
        model = self._deployments[cid]["litellm_params"]["model"]
        start_t = float(now) - latency_s
        start_dt, end_dt = self._sim_datetime(start_t), self._sim_datetime(float(now))
        call_id = f"baseline-{next(self._call_ids)}"
        total_tokens = input_tokens + output_tokens
        exception = None if success else _provider_exception(int(status_code or 500), model, retry_after_s)
        slo: dict[str, Any] = {
            "id": call_id, "call_type": "acompletion", "stream": False, "status": "success" if success else "failure",
            "model": model, "model_id": cid, "model_group": MODEL_GROUP, "api_base": API_BASE,
            "custom_llm_provider": "openai", "prompt_tokens": input_tokens, "completion_tokens": output_tokens,
            "total_tokens": total_tokens, "response_cost": float(cost_usd), "response_time": latency_s,
            "startTime": self._epoch + start_t, "endTime": self._epoch + float(now),
            "completionStartTime": self._epoch + float(now),
            "hidden_params": {"litellm_model_name": model, "model_id": cid, "api_base": API_BASE,
                              "response_cost": float(cost_usd)},
            "metadata": {}, "error_str": None if success else str(exception),
            "error_information": None if success else {"error_code": str(getattr(exception, "status_code", "")),
                                                       "error_class": type(exception).__name__},
        }
        kwargs: dict[str, Any] = {
            "model": cid, "litellm_params": self._litellm_params(cid), "standard_logging_object": slo,
            "call_type": "acompletion", "stream": False, "litellm_call_id": call_id, "response_cost": float(cost_usd),
            "start_time": start_dt, "end_time": end_dt, "api_call_start_time": start_dt, "completion_start_time": end_dt,
            "custom_llm_provider": "openai", "messages": None,
        }
        router, selector = self.router, self.selector
        if success:
            response = None
            if self._selector_reads_response or self._full_success_callback:
                # One ModelResponse per baseline, its usage rewritten per record (building a new one
                # costs ~50 us); LiteLLM's handlers only read ``usage`` and keep no reference.
                response = self._response
                if response is None:
                    response = self._response = litellm.ModelResponse(model=model, usage=litellm.Usage())
                response.model = model
                usage = response.usage
                usage.prompt_tokens, usage.completion_tokens, usage.total_tokens = input_tokens, output_tokens, total_tokens
            full_success_callback = self._full_success_callback

            async def dispatch() -> None:
                try:
                    if full_success_callback:
                        await router.deployment_callback_on_success(kwargs, response, start_dt, end_dt)
                    else:  # the only state that callback changes without rpm/tpm limits (module docstring)
                        increment_deployment_successes_for_current_minute(litellm_router_instance=router,
                                                                          deployment_id=cid)
                    if selector is not None:
                        await selector.async_log_success_event(kwargs, response, start_dt, end_dt)
                finally:
                    await self._drain()
        else:
            kwargs["exception"] = kwargs["original_exception"] = exception

            async def dispatch() -> None:
                try:
                    router.deployment_callback_on_failure(kwargs, None, start_dt, end_dt)
                    await router.async_deployment_callback_on_failure(kwargs, None, start_dt, end_dt)
                    if selector is not None:
                        await selector.async_log_failure_event(kwargs, None, start_dt, end_dt)
                finally:
                    await self._drain()

        with self._activate(now):
            self._run(dispatch())

    # -- introspection / lifecycle --------------------------------------------------------------
    def cooled_down(self, now: float | None = None) -> list[str]:
        """Candidate ids LiteLLM considers cooling down at ``now`` (default: last seen time)."""
        self._check_open()
        with self._activate(now):
            return self._run_sync(lambda: [str(x) for x in get_cooldown_deployments(self.router, None)])

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("LiteLLMBaseline is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        cancel = getattr(self.selector, "cancel_sync_task", None)

        async def shutdown() -> None:
            if cancel is not None:
                cancel()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
            await asyncio.sleep(0)

        try:
            self._run(shutdown())
        finally:
            if self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=5)
            if not self._loop.is_running():
                self._loop.close()

    def __enter__(self) -> "LiteLLMBaseline":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LiteLLMBaseline({self.strategy!r}, {list(self.candidate_ids)!r})"


def time_perf() -> float:
    return _time_module.perf_counter()
