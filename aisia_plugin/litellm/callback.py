"""The LiteLLM CustomLogger that routes the policy's aliases (``aisia_plugin.litellm.plugin``).

Its hooks, in the order a request meets them:

1. ``async_pre_call_hook``: the aliases' groups are (re)installed if the Router lost them; an
   ``auto/...`` name the policy does not define is refused with the available aliases; an
   alias request gets its failover budget (LiteLLM's ``num_retries``) and its session.
2. ``async_filter_deployments`` (per attempt, after LiteLLM's cooldown filter): the engine
   decides among the healthy deployments, leaving out those already tried for this call, and
   the filter returns only the chosen one (with the specialised model where it declares one).
3. ``async_log_success_event`` / ``async_log_failure_event`` (per attempt): the outcome is
   learned.
4. ``async_post_call_response_headers_hook``: the ``x-aisia-*`` headers.
5. ``async_post_call_failure_hook``: a refusal or an exhausted failover becomes one clear error.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Optional

from litellm.integrations.custom_logger import CustomLogger

from ..breaker import FailureKind, classify_failure
from ..engine import UnknownAlias
from ..policy.errors import PolicyError
from ..policy.loader import LoadedPolicy, load_policy_with_locations, peek_setting
from ..state import open_store
from . import checks, compat, events
from .groups import AliasCollision, collision_issues, group_entries, merged_groups, plan
from .headers import response_headers
from .logs import log_policy_error, log_started, policy_error_text, use_litellm_handler
from .runtime import Attempt, Call, Failure, PendingFailure, Runtime, caller_key, proxy_workers, session_key

if TYPE_CHECKING:
    from fastapi import HTTPException

log = logging.getLogger("aisia_plugin.litellm")

FAIL_CLOSED_ENV = "AISIA_FAIL_CLOSED"
# How often the Router is looked at off the request path (a config reload that rebuilt it, a
# model added at run time): the aliases' groups are back within this, even with no alias request.
ROUTER_CHECK_S = 2.0

class Refused(Exception):
    """The plugin answers the request itself (a strict budget, no candidate left, failover
    exhausted): the failure hook turns it into an HTTP error with this status and message."""

    def __init__(self, status_code: int, message: str, kind: str, alias: str, tried=()):
        super().__init__(message)
        self.status_code = status_code
        # Not ``message``: the Router appends its fallback explanation ("no fallback model group
        # was found ...") to the ``message`` of any exception that has one
        # (router.py, async_function_with_fallbacks); the client is to read the plugin's alone.
        self.text = message
        self.kind = kind
        self.alias = alias
        self.tried = list(tried)


_PROXY_SERVER = None
_PROXY_SERVER_MODULE = "litellm.proxy.proxy_server"


def _proxy_server():
    """LiteLLM's proxy_server module, imported on first use (not at import time: the proxy
    imports this package while it is itself being imported); kept, since an import statement
    per request costs a few microseconds."""
    global _PROXY_SERVER
    ps = _PROXY_SERVER
    if ps is None:
        from litellm.proxy import proxy_server

        ps = _PROXY_SERVER = proxy_server
    return ps


def _proxy_router():
    """The proxy's Router as the request hooks read it: None outside a proxy. Never an import:
    importing LiteLLM's proxy_server registers its own proxy callbacks (its budget limiter) into
    ``litellm.callbacks``, which a Router used alone would then run on every request."""
    ps = _PROXY_SERVER or sys.modules.get(_PROXY_SERVER_MODULE)
    return getattr(ps, "llm_router", None) if ps is not None else None


def _recognized(router, model: str) -> bool:
    """Whether the Router serves `model` itself: a model name, id, alias or group, or through a
    wildcard deployment (``model_name: "auto/*"`` or ``"*"``) or a default deployment."""
    if router is None:
        return False
    check = getattr(router, "is_recognized_model", None)  # 1.108; older releases: the names
    if check(model) if check is not None else model in (getattr(router, "model_names", None) or ()):
        return True
    if getattr(router, "default_deployment", None) is not None:
        return True
    wildcard = getattr(router, "wildcard_route_deployments", None)
    if wildcard is not None:
        return bool(wildcard(model, None))
    patterns = getattr(router, "pattern_router", None)
    return bool(patterns is not None and patterns.get_deployments_by_pattern(model=model))


def _router_groups(router):
    """The Router's table of routing groups, whose identity tells that the groups were rebuilt
    (``update_settings`` replaces it): public ``routing_groups`` since 1.106, ``_routing_groups``
    before it."""
    groups = getattr(router, "routing_groups", None)
    return groups if groups is not None else getattr(router, "_routing_groups", None)


def _error(status: int, message: str, kind: str, **extra) -> HTTPException:
    """The proxy's HTTP error (a FastAPI HTTPException). FastAPI comes with the proxy, not with a
    plain ``litellm``: imported here, where only the proxy's hooks ask for it."""
    from fastapi import HTTPException

    return HTTPException(status_code=status, detail={"error": {"message": message, "type": kind, **extra}})


def _alias_like(model: str) -> bool:
    """A name only the plugin would serve (``auto``, ``auto/...``) unless the Router has it."""
    return model == "auto" or model.startswith("auto/")


def fail_closed(policy=None) -> bool:
    """Whether a plugin that cannot serve its aliases at start stops the proxy: $AISIA_FAIL_CLOSED
    when set, else the policy's ``proxy.fail_closed`` (read from the user's files as they are
    when the policy does not load). A value of the variable that says neither is refused by
    failing closed, with a line saying why."""
    raw = os.environ.get(FAIL_CLOSED_ENV, "").strip().lower()
    if raw:
        if raw in ("1", "true", "yes", "on"):
            return True
        if raw in ("0", "false", "no", "off"):
            return False
        log.critical("aisia: $%s=%r is neither true nor false; failing closed", FAIL_CLOSED_ENV, raw)
        return True
    if policy is not None:
        return policy.proxy.fail_closed
    try:
        return peek_setting(("proxy", "fail_closed")) is True
    except Exception:  # unreadable files: the policy error says so
        return False


class AisiaPlugin(CustomLogger):
    def __init__(self, loaded: Optional[LoadedPolicy] = None):
        super().__init__()
        self.loaded = loaded
        self.runtime: Optional[Runtime] = None
        self._router_mark: Any = None  # what the installed groups were computed from
        self._installed_router: Any = None  # the Router the aliases were last installed into
        self._our_groups: set[str] = set()
        self.group_installs = 0  # how many times the aliases were (re)installed into the Router
        self._served_aliases: set[str] = set()
        self.empty_aliases: list[str] = []
        self._startup: Optional[asyncio.Task] = None
        self.watcher = None
        self._admin_mounted = False
        self._store_started = False
        self._closer: Optional[asyncio.Task] = None
        self.observer = None  # metrics, decision log, routing page (observability.py)
        self._gauges: Optional[asyncio.Task] = None
        self._store_closed = False
        self._router_watch: Optional[asyncio.Task] = None
        # Why the plugin stands aside (plain models are served, aliases answer 503 naming it):
        # None while it serves. The kind says what clears it: "collision" when the Router or
        # the policy changes so that no alias has a model's name; "policy" and "store" never.
        self.fault: Optional[str] = None
        self.fault_kind: Optional[str] = None
        self._fault_names: frozenset = frozenset()  # the aliases an unloadable policy names

    # -- start-up ----------------------------------------------------------------------------
    def boot(self) -> None:
        """Load the policy and, inside the proxy's event loop, start waiting for its Router. An
        invalid policy (every issue located) or state store setting stops the import when
        failing closed (``fail_closed``); otherwise the plugin stands aside: the proxy serves
        its plain models and every alias answers 503 naming the error."""
        from ..state.redis import StoreConfigError

        if _PROXY_SERVER_MODULE in sys.modules:  # inside the proxy: its log format
            use_litellm_handler()
        try:
            if self.loaded is None:
                self.loaded = load_policy_with_locations()
            self.runtime = Runtime(self.loaded, store=open_store(self.loaded.policy, url_later=True))
        except (PolicyError, StoreConfigError) as exc:
            policy = self.loaded.policy if self.loaded is not None else None
            if isinstance(exc, PolicyError):
                kind, text = "policy", "the policy is invalid: " + one_line_text(policy_error_text(exc))
            else:
                kind, text = "store", f"the state store cannot start: {exc}"
            if fail_closed(policy):
                if isinstance(exc, PolicyError):
                    log_policy_error(exc)
                else:
                    log.critical("aisia: %s", text)
                raise
            self._stand_aside(kind, text, policy_error_text(exc) if kind == "policy" else None)
            if kind == "policy":  # its aliases' names, as far as its files say (the auto/ ones go without saying)
                try:
                    named = peek_setting(("aliases",))
                except Exception:
                    named = None
                self._fault_names = frozenset(named) if isinstance(named, dict) else frozenset()
            self._in_proxy_loop(self._start_standing_aside)
            return
        mismatch = compat.outside_declared_range()
        if mismatch is not None:
            log.warning("aisia: %s", mismatch)
        from .observability import Observer

        self.observer = Observer(self.runtime)
        self._in_proxy_loop(self._start)

    def _in_proxy_loop(self, start) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # imported outside a running proxy (tests, tools): hooks still work when called
        if _PROXY_SERVER_MODULE not in sys.modules:
            # Not loaded by the proxy (its config loader runs inside proxy_server): a Router used
            # alone, whose owner installs the aliases (ensure_groups); a plain litellm may not
            # even have the proxy's dependencies.
            return
        self._startup = loop.create_task(start())

    async def _router(self):
        """The proxy's Router, once it exists (the proxy builds it after importing its callbacks)."""
        ps = _proxy_server()
        while ps.llm_router is None:
            await asyncio.sleep(0.05)
        return ps.llm_router

    async def _start_standing_aside(self) -> None:
        await self._router()
        self._mount_admin()

    async def _start(self) -> None:
        """Wait for the Router, then install the aliases, open the store, mount the admin routes
        and watch the policy files and the Router."""
        ps = _proxy_server()
        router = await self._router()
        try:
            self.ensure_groups(router, startup=True)
        except AliasCollision as exc:
            if fail_closed(self.runtime.policy):
                self._fatal(str(exc))  # its located lines, as `aisia validate` prints them
                return
            self._withdraw(router, "collision", str(exc))
        from ..state.redis import StoreConfigError

        try:
            await self._ensure_store()
        except StoreConfigError as exc:
            if fail_closed(self.runtime.policy):
                self._fatal(f"the state store cannot start: {exc}")
                return
            self._withdraw(router, "store", f"the state store cannot start: {exc}")
            self._mount_admin()
            return
        self._note_workers()
        self._mount_admin()
        self._gauges = asyncio.get_running_loop().create_task(self.observer.run_gauges())
        from .reload import PolicyWatcher

        self.watcher = PolicyWatcher(self)
        self.watcher.start()
        self._router_watch = asyncio.get_running_loop().create_task(self._watch_router())
        # Held here: the loop keeps only a weak reference to a task, and a pending task nothing
        # else refers to is garbage-collected ("Task was destroyed but it is pending").
        self._closer = asyncio.get_running_loop().create_task(self._close_at_exit())
        self._close_in_shutdown(ps)
        log_started(self)

    async def _close_at_exit(self) -> None:
        """Flush the store when the proxy stops: LiteLLM has no shutdown hook for callbacks, but
        the server's event loop cancels its remaining tasks on the way out, this one included."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await self._close_store()
            raise

    def _close_in_shutdown(self, ps) -> None:
        """Close the store in the proxy's own shutdown too: on SIGTERM, uvicorn re-raises the
        signal once it has served, which ends the process before the loop would cancel
        ``_close_at_exit``; the proxy's lifespan awaits ``proxy_shutdown_event`` by its name."""
        original = getattr(ps, "proxy_shutdown_event", None)
        if original is None or getattr(original, "aisia_closes_store", False):
            return

        async def proxy_shutdown_event(*args, **kwargs):
            await self._close_store()
            return await original(*args, **kwargs)

        proxy_shutdown_event.aisia_closes_store = True
        ps.proxy_shutdown_event = proxy_shutdown_event

    async def _close_store(self) -> None:
        if self._store_closed or self.runtime is None:
            return
        self._store_closed = True
        try:
            await self.runtime.store.aclose()
        except Exception:
            log.exception("aisia: closing the state store failed")

    async def _ensure_store(self) -> None:
        """Start the store once; a Redis store without its own URL takes the one LiteLLM is
        configured with (shared_redis.py says which wins)."""
        if self._store_started or self.runtime is None:
            return
        self._store_started = True
        store = self.runtime.store
        if getattr(store, "url", "") is None:
            from .shared_redis import litellm_redis

            found = litellm_redis(_proxy_server().llm_router)
            if found is None:
                raise store.missing_url(" and LiteLLM is configured with no Redis (router_settings redis_host/"
                                        "redis_port, litellm_settings.cache_params, REDIS_URL or REDIS_HOST)")
            store.use_url(*found)
            log.warning("aisia: the state store uses LiteLLM's Redis %s (from %s; $%s is unset)", store.shown_url,
                     found[1], store.cfg.redis_url_env)
        await store.start()

    async def _started(self) -> None:
        """Wait for the start-up task (the store opened), or open the store when there is none
        (the hooks called outside a running proxy)."""
        if self._startup is not None:
            await asyncio.shield(self._startup)
        else:
            await self._ensure_store()

    def _note_workers(self) -> None:
        """One line at start when several workers each keep their own memory store."""
        workers = proxy_workers()
        if workers > 1 and self.runtime.policy.state.backend == "memory":
            log.warning("aisia: %d workers with state.backend: memory: each worker learns on its own and feedback "
                        "reaches only the worker that served the request (POST /aisia/feedback answers 404 on the "
                        "others); set state.backend: redis to share them", workers)

    def _fatal(self, message: str) -> None:
        """A start-up error when failing closed (``proxy.fail_closed`` or $AISIA_FAIL_CLOSED):
        logged with its location, then the worker exits."""
        log.critical("aisia: %s", message)
        os._exit(78)

    # -- standing aside ------------------------------------------------------------------------
    def _stand_aside(self, kind: str, message: str, located: Optional[str] = None) -> None:
        """Stop serving aliases for `message` (logged once, no traceback: one line, or for an
        invalid policy its `located` lines as ``aisia validate`` prints them, then one line)."""
        message = one_line_text(message)
        if message == self.fault:
            return
        self.fault, self.fault_kind = message, kind
        self._served_aliases = set()
        then = (f"the proxy serves its models, every alias answers 503 until this is fixed "
                f"(proxy.fail_closed: true or ${FAIL_CLOSED_ENV}=true refuses to start instead)")
        if located is not None:
            log.critical("aisia: the policy is invalid:\n%s\n%s", located, then)
        else:
            log.error("aisia: %s; %s", message, then)

    def _withdraw(self, router, kind: str, message: str) -> None:
        """Stand aside and take the aliases' groups out of the Router: a name the policy and a
        model share stays the model's."""
        self._stand_aside(kind, message)
        try:
            existing = router.get_settings().get("routing_groups") or []
            if self._our_groups:
                router.update_settings(routing_groups=merged_groups(existing, self._our_groups, []))
            self._our_groups = set()
        except Exception:
            log.exception("aisia: could not take the aliases' groups out of the Router")
        self._router_mark = self._mark(router)

    def _resume(self) -> None:
        if self.fault_kind == "collision":
            log.warning("aisia: resolved (%s); the aliases are served again", self.fault)
            self.fault = self.fault_kind = None

    def unavailable(self) -> HTTPException:
        return _error(503, f"the aisia router serves no alias: {self.fault}", "aisia_unavailable", param="model")

    def _mark(self, router) -> tuple:
        """What the installed groups were computed from: a change means the Router was rebuilt,
        its groups replaced, a model added or removed, or the policy reloaded."""
        rt = self.runtime
        return (id(router), id(_router_groups(router)), len(router.model_list or ()), id(rt.policy) if rt else None)

    def reconcile(self, router) -> None:
        """Re-install the groups if the Router changed; a collision is remembered (logged once,
        not looked for again until the Router or the policy changes). Never raises."""
        if self.runtime is None or self.fault_kind in ("policy", "store") or self._mark(router) == self._router_mark:
            return
        try:
            self.ensure_groups(router)
        except AliasCollision as exc:
            self._withdraw(router, "collision", str(exc))
            return
        except Exception:
            self._router_mark = self._mark(router)
            log.exception("aisia: installing the aliases' groups failed")
            return
        self._resume()

    async def _watch_router(self) -> None:
        while True:
            await asyncio.sleep(ROUTER_CHECK_S)
            router = _proxy_server().llm_router
            if router is not None:
                self.reconcile(router)

    def _mount_admin(self) -> None:
        if self._admin_mounted:
            return
        from . import observability
        from .admin import mount, mount_standing_aside

        app = _proxy_server().app
        if self.runtime is None or self.fault_kind == "store":
            mount_standing_aside(app, self)
        else:
            observability.mount(app, self)
            mount(app, self)
        self._admin_mounted = True

    # -- the aliases as Router groups --------------------------------------------------------
    def ensure_groups(self, router, *, startup: bool = False, runtime: Optional[Runtime] = None) -> None:
        """Install (or re-install) the aliases' priority groups when the Router, its model list or
        its groups changed since the last installation; cheap otherwise. Raises AliasCollision
        when an alias has the name of one of the user's models (the model keeps its name)."""
        rt = runtime or self.runtime
        self._installed_router = router
        if self._mark(router) == self._router_mark:
            return
        model_list = router.model_list or []
        deps = rt.deployments(model_list)
        names = [d["model_name"] for d in model_list if d.get("model_name")]
        existing = router.get_settings().get("routing_groups") or []
        foreign = [g["group_name"] for g in existing if g.get("group_name") not in self._our_groups]
        planned = plan(rt.policy, deps, names, getattr(router, "model_group_alias", None), foreign)
        if planned.collisions:
            raise AliasCollision(collision_issues(planned.collisions, rt.loaded.locations))
        entries = group_entries(planned.members)
        router.update_settings(routing_groups=merged_groups(existing, self._our_groups, entries))
        self._our_groups = set(planned.members)
        self._served_aliases = set(planned.members)
        self.empty_aliases = planned.empty
        self._router_mark = self._mark(router)
        self.group_installs += 1
        if planned.empty and startup:
            log.warning("aisia: no deployment of the LiteLLM config is a candidate of %s; requests for them get 503",
                        ", ".join(planned.empty))
        log.info("aisia: serving %d aliases: %s", len(planned.members), ", ".join(sorted(planned.members)))

    def apply_policy(self, loaded: LoadedPolicy, engine=None) -> None:
        """Serve a reloaded policy (with its engine when built already); an alias colliding with
        a model keeps the previous one."""
        rt = self.runtime
        previous, previous_engine = rt.loaded, rt.engine
        rt.swap(loaded, engine)
        router = _proxy_server().llm_router
        if router is None:
            return
        try:
            self.ensure_groups(router)
        except AliasCollision:
            rt.swap(previous, previous_engine)
            self.reconcile(router)
            raise
        self._resume()

    def available_aliases(self) -> list[str]:
        return sorted(self._served_aliases)

    # -- 1. before routing -------------------------------------------------------------------
    async def async_pre_call_hook(self, user_api_key_dict, cache, data: dict, call_type):
        # A plain model name costs one dict lookup and one prefix test: the Router's groups are
        # looked at only for alias requests (and in the background, _watch_router).
        model = data.get("model")
        if not isinstance(model, str):
            return data
        rt = self.runtime
        ap = rt.policy.aliases.get(model) if rt is not None else None
        if ap is None:
            if not (_alias_like(model) or model in self._fault_names):
                return data
            router = _proxy_router()
            if _recognized(router, model) and model not in self._our_groups:
                return data  # the user's own model (or one LiteLLM matches) of that name
            if self.fault is not None:
                raise self.unavailable()
            self.observer.refused(model, "unknown_alias")
            raise _error(400, f"unknown alias {model!r}; the aliases this proxy serves are: "
                         f"{', '.join(self.available_aliases()) or '(none)'}", "aisia_unknown_alias",
                         param="model", available=self.available_aliases())
        router = _proxy_router()
        if router is not None and self._mark(router) != self._router_mark:
            self.reconcile(router)  # the Router was rebuilt or changed since the groups were installed
        if self.fault is not None:
            if _recognized(router, model) and model not in self._our_groups:
                return data  # a model took the alias's name: the model keeps it
            raise self.unavailable()
        if not self._store_started:  # a request before the start-up task got to it
            await self._started()
            if self.fault is not None:
                raise self.unavailable()
        if model not in self._served_aliases:
            raise _error(503, f"alias {model!r}: no deployment of this proxy is one of its candidates "
                         f"({ap.description})", "aisia_no_candidates", param="model")
        kind = str(getattr(call_type, "value", call_type) or "")
        if kind in _NOT_ROUTED_CALL_TYPES:
            self.observer.refused(model, "unsupported_api")
            raise _error(400, f"alias {model!r} routes chat, completion and responses requests; a {kind} request "
                         f"goes to an embedding, image or audio model by its own name", "invalid_request_error",
                         param="model")
        # What LiteLLM would refuse inside the provider call (and report as that deployment's
        # failure) is the caller's 400 here, before any deployment is tried.
        problem = checks.message_problem(data.get("messages"))
        if problem is not None:
            self.observer.refused(model, "invalid_request")
            raise _error(400, problem[1], "invalid_request_error", param=problem[0])
        # LiteLLM's retries are the alias's failover: each one reaches the filter, which moves on
        # to a deployment not yet tried for this request. A client's own num_retries is kept.
        if data.get("num_retries") is None:
            data["num_retries"] = ap.failover.attempts
        # The plugin's own id of this request: LiteLLM's call id comes from the client's
        # x-litellm-call-id header and is shared by as many requests as send the same one.
        rid = events.stamp_request_id(data)
        call = rt.open_call(rid, model, self._session(rt, ap, data, user_api_key_dict))
        call.key = caller_key(user_api_key_dict)  # who may give feedback for it
        return data

    def _session(self, rt, ap, data: dict, user_api_key_dict) -> Optional[str]:
        """The conversation an ``lkgp`` alias keeps on its last good deployment: LiteLLM's
        session id (its ``x-litellm-session-id`` header, or another session header LiteLLM
        reads), else the policy's session header (``x-aisia-session``), else the request's
        ``user``, else the API key (each hashed)."""
        if ap.strategy != "lkgp":
            return None
        value = data.get("litellm_session_id")
        meta = data.get("litellm_metadata") or data.get("metadata") or {}
        if meta.get("litellm_session_id_generated"):  # minted per request (missing_session_id: generate)
            value = None
        if not value:
            headers = (data.get("proxy_server_request") or {}).get("headers") or {}
            wanted = rt.policy.proxy.session_header.lower()
            for k, v in headers.items():
                if k.lower() == wanted:
                    value = v
                    break
        if not value:
            value = data.get("user") or None
        if not value:
            value = getattr(user_api_key_dict, "token", None) or getattr(user_api_key_dict, "api_key", None)
        return session_key(str(value)) if value else None

    # -- 2. the decision, per attempt ----------------------------------------------------------
    async def async_filter_deployments(self, model: str, healthy_deployments: list, messages, request_kwargs=None,
                                       parent_otel_span=None) -> list:
        """Decide among the healthy deployments and hand LiteLLM every allowed candidate, ranked
        through ``litellm_params.order`` (1 = the choice): LiteLLM's later steps (pre-call
        checks, tag routing, limits) may still drop one, and its order filter then sends the
        best that is left."""
        rt = self.runtime
        if rt is None:
            return healthy_deployments
        ap = rt.policy.aliases.get(model)
        if ap is None or not healthy_deployments or model not in self._served_aliases:
            return healthy_deployments  # (not served: a model that has the alias's name keeps it)
        kwargs = request_kwargs or {}
        # No pre-call hook ran (a Router used without the proxy): the id is given here.
        rid = events.request_id(kwargs) or events.stamp_request_id(kwargs)
        call = rt.call_for(rid, model, create=True)
        rt.call(rid).decided(call)
        if call.caller_fault is not None:  # the same failure on two deployments: theirs
            status, message = call.caller_fault
            raise Refused(status, message, "invalid_request_error", model, call.tried)
        tried = call.tried  # (a fresh list; read once: the explain entry keeps it)
        attempt = len(tried)
        if attempt > ap.failover.attempts:
            raise self._exhausted(call)
        refused = call.refused_choices() if compat.FILTER_KEEPS_IDS_ONLY else []
        if messages is None:  # /v1/responses and /v1/completions carry the prompt elsewhere
            messages = events.prompt_messages(kwargs)
        deps = rt.deployments(healthy_deployments)
        store, engine = rt.store, rt.engine
        await store.prepare([d.id for d in deps], model)
        exclude = tried + [i for i in refused if i not in tried]
        limited = await checks.over_usage_limits(self._installed_router, healthy_deployments, messages)
        if limited:
            if all(d.id in limited or d.id in exclude for d in deps):
                raise Refused(429, f"alias {model!r}: every candidate is at its LiteLLM rate limit: "
                              + "; ".join(f"{i} {why}" for i, why in limited.items()),
                              "aisia_rate_limited", model, call.tried)
            exclude.extend(i for i in limited if i not in exclude)
        started = time.perf_counter()
        while True:
            try:
                decision = engine.decide(model, messages or [], deps, tools=kwargs.get("tools"), exclude=exclude,
                                         reserve=False, session=call.session)
            except UnknownAlias:  # the policy was reloaded without it between the hooks
                raise Refused(404, f"alias {model!r} is no longer defined by the policy", "aisia_unknown_alias", model)
            if decision.refused is not None:
                self.observer.decided(call, decision, attempt, time.perf_counter() - started)
                entry = rt.explain_entry(call, decision, attempt, tried)
                entry["outcome"] = {"refused": decision.refused}
                if decision.refused == "no_candidates" and call.tried:
                    raise self._exhausted(call)
                raise Refused(decision.status_code, f"alias {model!r}: {decision.reason}",
                              f"aisia_{decision.refused}", model, call.tried)
            if decision.probe and not await store.reserve_probe_shared(decision.deployment_id, engine.clock(),
                                                                        engine.breaker):
                exclude.append(decision.deployment_id)  # another request took the last probe slot
                continue
            break
        self.observer.decided(call, decision, attempt, time.perf_counter() - started, messages)
        ranked = decision.ranking()
        call.attempts.append(Attempt(decision, tuple(ranked), rt.explain_entry(call, decision, attempt, tried)))
        if compat.FILTER_KEEPS_IDS_ONLY:
            # Only the ids count (see compat): the choice alone, as LiteLLM configured it.
            return [d for d in healthy_deployments if str((d.get("model_info") or {}).get("id")) == ranked[0]][:1] \
                or healthy_deployments
        return _ranked_deployments(healthy_deployments, ranked, decision)

    def _exhausted(self, call) -> Refused:
        tried = ", ".join(f"{f.deployment_id} ({f.description})" for f in call.failures) or ", ".join(call.tried)
        status = 429 if call.failures and all(f.kind is FailureKind.RATE_LIMIT for f in call.failures) else 502
        return Refused(status, f"alias {call.alias!r}: every allowed candidate failed; tried {tried}",
                       "aisia_all_candidates_failed", call.alias, call.tried)

    # -- 3. each attempt: sent, failed, served -------------------------------------------------
    def _attempt_call(self, data):
        """(the alias call, the deployment id) of a per-attempt hook's request; (None, None) for
        a request no alias routed."""
        rt = self.runtime
        if rt is None or not rt.calls:
            return None, None
        meta = events.request_metadata(data)  # read once for both: the request's id and its group
        rid = events.request_id_in(meta)
        call = rt.call_for(rid, meta.get("model_group")) if rid else None
        dep = (data.get("model_info") or {}).get("id") if call is not None else None
        return call, (str(dep) if dep is not None else None)

    async def async_pre_call_deployment_hook(self, kwargs, call_type):
        """LiteLLM has chosen the deployment of an attempt (after its own checks): which one it
        is, and when it was sent."""
        rt = self.runtime
        if rt is None or not rt.calls:  # no alias request in flight: nothing to look up, no call made
            return None
        call, dep = self._attempt_call(kwargs)
        attempt = call.unsent() if call is not None else None
        if attempt is not None and dep in attempt.ranked:
            attempt.deployment_id = dep
            attempt.started = time.monotonic()
            attempt.explained["served_by"] = dep
        return None

    async def async_post_call_failure_deployment_hook(self, request_data, exception, call_type, fallback_depth=None):
        """One failed attempt (the first, each retry, each fallback step): learned once the next
        attempt shows it was not the request's own fault."""
        call, dep = self._attempt_call(request_data)
        attempt = call.sent_attempt(dep) if dep is not None else None
        if attempt is None:
            return None
        latency = time.monotonic() - attempt.started if attempt.started is not None else None
        self._failed(call, attempt, events.from_exception(attempt.deployment_id, exception, latency))
        return None

    async def async_post_call_success_deployment_hook(self, request_data, response, call_type):
        """An attempt was answered: the failure before it, if any, was that deployment's (the
        answer itself is learned from its logging event, which has its cost and tokens)."""
        rt = self.runtime
        if rt is None or not rt.calls:
            return None
        call, _ = self._attempt_call(request_data)
        if call is not None:
            self._settle_request(call)
        return None

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        rt = self.runtime
        if rt is None or not rt.calls:
            return
        call = self._call_of_event(kwargs)
        if call is None:
            return
        outcome = events.success(kwargs, start_time, end_time)
        attempt = call.sent_attempt(outcome.deployment_id)
        if attempt is None:
            return
        self._settle_request(call)  # a failure before this success was the deployment's
        stream = events.is_stream(kwargs)  # (a time to first token is learned for a stream only)
        self._learn_attempt(call, attempt, outcome, stream,
                            events.time_to_first_token(kwargs, start_time) if stream else None)

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        """LiteLLM's one failure event per request: an attempt no per-attempt hook reported (a
        stream broken after its first chunk) is learned from it."""
        call = self._call_of_event(kwargs)
        if call is None:
            return
        outcome = events.failure(kwargs, start_time, end_time)
        attempt = call.sent_attempt(outcome.deployment_id)
        if attempt is not None and (call.pending is None or call.pending.attempt is not attempt):
            self._failed(call, attempt, outcome, events.is_stream(kwargs))
        if call.pending is not None and self._spent(call):
            # No attempt of this alias follows (its budget is spent, or every candidate was
            # tried): nothing will show the failure to be the caller's. Through the proxy the
            # failure hook would settle it too; a Router used alone has no such hook.
            self._settle(call)

    def _call_of_event(self, kwargs):
        """The alias call a logging event belongs to; None for any other request (a plain model
        name, or a call whose record has expired): its outcome is not even read."""
        rt = self.runtime
        if rt is None or not rt.calls:
            return None
        rid = events.request_id(kwargs)
        return rt.call_for(rid, events.model_group(kwargs)) if rid else None

    def _failed(self, call, attempt, outcome, stream: bool = False) -> None:
        """A failed attempt: the caller's when it is a client error, or when an earlier attempt
        failed the same way on another deployment (then neither is learned and the next pass of
        the filter answers the caller); else kept pending until the next outcome."""
        rt = self.runtime
        kind = classify_failure(rt.policy.circuit_breaker, status_code=outcome.status_code,
                                error_type=outcome.error_type, message=outcome.message)
        if call.answered:
            # The answer had begun (a stream broken midway): the deployment's, whatever it says.
            call.failures.append(Failure(attempt.deployment_id, kind, events.describe_failure(outcome), ()))
            self._learn_attempt(call, attempt, outcome, stream, None, kind)
            return
        raw = rt.deployment_names(attempt.deployment_id)
        signature = events.failure_signature(outcome, raw)
        what = events.describe_failure(outcome)
        earlier = [] if events.is_provider_side(outcome) else \
            [f for f in call.failures if f.deployment_id != attempt.deployment_id and f.signature == signature]
        call.failures.append(Failure(attempt.deployment_id, kind, what, signature))
        if kind is FailureKind.CLIENT or earlier:
            attempt.recorded = True
            if call.pending is not None and call.pending.signature == signature:
                call.pending.attempt.recorded = True
                call.pending = None
            if earlier:
                call.caller_fault = (outcome.status_code if outcome.status_code and 400 <= outcome.status_code < 500
                                     else 400, f"alias {call.alias!r}: the request failed the same way on "
                                     f"{earlier[0].deployment_id} and {attempt.deployment_id}, so no other deployment is "
                                     f"tried: {outcome.message or what}")
            attempt.explained["outcome"] = {"success": False, "failure": {"kind": "client", "error": what},
                                            "learned": False}
            rt.after(self.observer.learned, call, call.attempts.index(attempt), outcome, None, FailureKind.CLIENT,
                     time.time())
            return
        self._settle(call)
        call.pending = PendingFailure(attempt, outcome, kind, signature)

    def _spent(self, call) -> bool:
        """Whether the alias's call will see no further attempt: its failover budget is spent, or
        every candidate its last decision ranked has been tried."""
        ap = self.runtime.policy.aliases.get(call.alias)
        tried = call.tried
        if ap is not None and len(tried) > ap.failover.attempts:
            return True
        return bool(call.attempts) and set(call.attempts[-1].ranked) <= set(tried)

    def _settle_request(self, call) -> None:
        """An attempt of the request was answered: every failure pending before it, in the alias
        asked for and in any alias it fell back to, was that deployment's."""
        first = self.runtime.call(call.request_id) or call
        if not first.branches:  # (most requests: no alias-to-alias fallback)
            if first.pending is not None:
                self._settle(first)
            return
        for c in (first, *first.branches.values()):
            self._settle(c)

    def _settle(self, call) -> None:
        """Learn the pending failure: what came after it showed it was the deployment's."""
        pending, call.pending = call.pending, None
        if pending is not None:
            self._learn_attempt(call, pending.attempt, pending.outcome, False, None, pending.kind)

    def _learn_attempt(self, call, attempt, outcome, stream: bool, ttft, kind=None) -> None:
        """Learn an attempt's outcome once (a per-attempt hook and an event may both report it);
        `kind`, a failure's class, as ``_failed`` found it. What the next hooks read (served,
        finished) is settled here; the learning itself, its log line and metrics are a step run
        after the hook (``_learn``, runtime.AfterResponse)."""
        rt = self.runtime
        if attempt.recorded:
            return
        attempt.recorded = True
        try:
            if outcome.success and not call.served:
                rt.note_served(call, attempt.decision, outcome.deployment_id)
            if outcome.success or call.answered:
                # A success ends the call; a failure after the answer began (a broken stream) too.
                call.finished = True
                if call.answered:
                    rt.close_call(call)
        except Exception:  # learning must never break serving
            log.exception("aisia: could not learn from an outcome")
        if outcome.success:
            outcome = rt.counted_cost(outcome)
        rt.after(self._learn, rt.engine, call, attempt, outcome, stream, ttft, kind, time.time())

    def _learn(self, engine, call, attempt, outcome, stream: bool, ttft, kind, at: float) -> None:
        try:
            reward = engine.record(attempt.decision, outcome, session=call.session)
            # Learned once: what learning needed of the decision (the contextual strategy's request
            # vector, its arrays) is spent; the explain log keeps the decision for hundreds of
            # requests, and nothing it renders reads it.
            attempt.decision.context = None
            result = {"success": outcome.success, "latency_s": outcome.latency_s, "reward": reward,
                      "cost_usd": outcome.cost_usd}
            if stream:
                result["stream"] = True
                result["time_to_first_token_s"] = ttft
            if kind is not None:
                result["failure"] = {"kind": kind.value, "error": events.describe_failure(outcome)}
            attempt.explained["outcome"] = result
            self.observer.learned(call, call.attempts.index(attempt), outcome, reward, kind, at)
        except Exception:  # learning must never break serving
            log.exception("aisia: could not learn from an outcome")

    # -- 4. response headers -------------------------------------------------------------------
    async def async_post_call_response_headers_hook(self, data, user_api_key_dict, response, request_headers=None,
                                                    litellm_call_info=None):
        rt = self.runtime
        if rt is None or not rt.calls:
            return None
        first = rt.call(events.request_id(data))
        call = first.current if first is not None else None
        if call is None or not call.attempts:
            return None
        self._settle_request(first)  # an answer came: the failures before it were the deployments'
        a = call.attempts[-1]
        d = a.decision
        first.answered = call.answered = True
        if first.finished or call.finished:
            rt.close_call(first)
        if response is not None and not call.served:
            # The response is LiteLLM's answer: feedback may follow at once, before the success
            # event (logged in the background) arrives.
            rt.note_served(call, d, a.deployment_id)
        return response_headers(call, a, rt.policy.proxy.verbose_reason_header)

    # -- 5. errors -------------------------------------------------------------------------------
    async def async_post_call_failure_hook(self, request_data, original_exception, user_api_key_dict,
                                           traceback_str=None):
        if isinstance(original_exception, Refused):
            exc = original_exception
            return _error(exc.status_code, exc.text, exc.kind, alias=exc.alias, tried=exc.tried)
        rt = self.runtime
        if rt is None or not rt.calls:
            return None
        first = rt.call(events.request_id(request_data or {}))
        if first is None:
            return None
        call = first.current
        rt.close_call(first)  # nothing else is expected for it
        self._settle_request(first)
        if call.caller_fault is not None:
            status, message = call.caller_fault
            return _error(status, message, "invalid_request_error", alias=call.alias, tried=call.tried)
        if not call.failures or events.is_router_refusal(original_exception):
            return None  # LiteLLM's own answer (its refusal, a limit), as it gave it
        if call.failures[-1].kind is FailureKind.CLIENT:
            return None  # the caller's own error (a bad request, a prompt too long): theirs to see as is
        exc = self._exhausted(call)
        return _error(exc.status_code, exc.text, exc.kind, alias=exc.alias, tried=exc.tried)


# The APIs an alias does not route (its candidates are chosen for prompts): LiteLLM's call types.
_NOT_ROUTED_CALL_TYPES = frozenset((
    "embedding", "aembedding", "embeddings", "image_generation", "aimage_generation", "image_edit", "aimage_edit",
    "moderation", "amoderation", "transcription", "atranscription", "audio_transcription", "speech", "aspeech",
    "rerank", "arerank"))


_PRICE_KEYS = ("input_cost_per_token", "output_cost_per_token", "input_cost_per_second", "output_cost_per_second")


def _specialised(raw: dict, params: dict, model: str) -> dict:
    """The deployment sending `model`, its specialised model: LiteLLM prices a deployment by its
    id's registered price or its ``base_model``, so the copy names the model as its base model and
    drops the base deployment's own prices (LiteLLM bills and logs the model really called)."""
    params = {k: v for k, v in params.items() if k not in _PRICE_KEYS}
    params["model"] = params["base_model"] = model
    info = {k: v for k, v in (raw.get("model_info") or {}).items() if k not in _PRICE_KEYS}
    info["base_model"] = model
    return {**raw, "litellm_params": params, "model_info": info}


def _ranked_deployments(healthy: list, ranked: list, decision) -> list:
    """Copies of the ranked deployments with ``litellm_params.order`` = rank (LiteLLM's order
    filter keeps the lowest that survived its checks); the choice carries its specialised
    model when it declares one. Fresh copies: never the Router's own dicts."""
    by_id = {}
    for raw in healthy:
        by_id.setdefault(str((raw.get("model_info") or {}).get("id")), raw)
    out = []
    for rank, dep in enumerate(ranked, start=1):
        raw = by_id.get(dep)
        if raw is None:
            continue
        params = dict(raw.get("litellm_params") or {})
        params["order"] = rank
        if rank == 1 and decision.model and decision.model != params.get("model"):
            out.append(_specialised(raw, params, decision.model))
            continue
        out.append({**raw, "litellm_params": params})
    return out or healthy


def one_line_text(text: str) -> str:
    """A multi-line error as one log line (its lines joined by '; ')."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())
