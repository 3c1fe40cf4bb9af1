"""The plugin's life in the proxy, apart from any one request: start-up (load the policy, wait for
the Router, install the aliases' groups, open the store, mount the admin routes, watch the policy
files and the Router), fault handling (stand aside: plain models served, every alias answering 503
naming why; withdraw the groups when an alias collides with a model; resume when that clears) and
shutdown (the store closed in the proxy's own ``proxy_shutdown_event``, patched, and at exit).

``ProxyLife`` is the LiteLLM callback's base (callback.AisiaPlugin): it defines none of LiteLLM's
hooks (LiteLLM switches code paths on which hooks a class defines), only what they call to know
whether an alias may be served (``admit``)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Optional

from ..policy.errors import PolicyError
from ..policy.loader import LoadedPolicy, load_policy_with_locations, peek_setting
from ..state import open_store
from . import compat
from .groups import JUDGE_FIELD, AliasCollision, collision_issues, group_entries, merged_groups, plan
from .logs import log_policy_error, log_started, policy_error_text, use_litellm_handler
from .runtime import Runtime, proxy_workers

if TYPE_CHECKING:
    from fastapi import HTTPException

log = logging.getLogger("aisia_plugin.litellm")

FAIL_CLOSED_ENV = "AISIA_FAIL_CLOSED"
# How often the Router is looked at off the request path (a config reload that rebuilt it, a
# model added at run time): the aliases' groups are back within this, even with no alias request.
ROUTER_CHECK_S = 2.0

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


def http_error(status: int, message: str, kind: str, **extra) -> HTTPException:
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


class ProxyLife:
    """Start-up, standing aside and the aliases' Router groups, for the callback built on it."""

    def __init__(self, loaded: Optional[LoadedPolicy] = None):
        self.loaded = loaded
        self.runtime: Optional[Runtime] = None
        self._router_mark: Any = None  # what the installed groups were computed from
        self._judge_met: Any = None  # the policy last installed with its judge present (reconcile)
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
        self.judge = None  # the sampled judge of served answers (judge.py; idle unless quality.judge names one)
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

        from .judge import JudgeRunner, deployment_by_name

        self.observer = Observer(self.runtime)
        self.judge = JudgeRunner(lambda: self.runtime.engine, metrics=self.observer.metrics,
                                 deployment_of=deployment_by_name(self.observer.deployments),
                                 evidence_log=self.observer.evidence)
        self.runtime.conversations.judge_of = lambda: self.judge  # signals compared with its grades
        self.runtime.conversations.observer = self.observer  # signals counted and logged
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
        if self._startup is not None and not self._router_used_alone():
            await asyncio.shield(self._startup)
        else:
            await self._ensure_store()

    def _router_used_alone(self) -> bool:
        """The aliases were installed into a Router by its owner (``ensure_groups``) while the
        proxy, whose module some other code imported, has no Router: the start-up task would wait
        for one forever, and the request must not wait with it."""
        if self._installed_router is None:
            return False
        ps = sys.modules.get(_PROXY_SERVER_MODULE)
        return ps is None or getattr(ps, "llm_router", None) is None

    def _note_workers(self) -> None:
        """One line at start when several workers each keep their own memory store."""
        workers = proxy_workers()
        if workers > 1 and self.runtime.policy.state.backend == "memory":
            log.warning("aisia: %d workers with state.backend: memory: each worker learns on its own, feedback "
                        "reaches only the worker that served the request (POST /aisia/feedback answers 404 on the "
                        "others) and a routing-page sign-out revokes its session on one worker only; set "
                        "state.backend: redis to share them", workers)

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
        return http_error(503, f"the aisia router serves no alias: {self.fault}", "aisia_unavailable", param="model")

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
            # A judge whose deployment left the Router after its policy was installed grades
            # nothing more (its calls fail and teach nothing); it does not take the aliases down,
            # whose candidates are still there. A policy never installed with its judge (missing
            # at start) still requires it, as at start.
            self.ensure_groups(router, judge_required=self._judge_met is not self.runtime.policy)
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
    def ensure_groups(self, router, *, startup: bool = False, runtime: Optional[Runtime] = None,
                      judge_required: bool = True) -> None:
        """Install (or re-install) the aliases' priority groups when the Router, its model list or
        its groups changed since the last installation; cheap otherwise. Raises AliasCollision
        when an alias has the name of one of the user's models (the model keeps its name), or,
        when `judge_required` (at start and on a policy reload), when ``quality.judge`` names no
        deployment; otherwise such a judge is logged and the aliases are served."""
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
        conflicts = planned.collisions
        if not judge_required:
            judge = [c for c in conflicts if c.path == JUDGE_FIELD]
            conflicts = [c for c in conflicts if c.path != JUDGE_FIELD]
            if judge and not conflicts:
                log.warning("aisia: %s; the judge grades nothing until it is back (the aliases are served)",
                            collision_issues(judge, rt.loaded.locations)[0])
        if conflicts:
            raise AliasCollision(collision_issues(conflicts, rt.loaded.locations))
        if judge_required:
            self._judge_met = rt.policy  # installed with its judge (or none): the Router may lose it later
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

    # -- an alias request's admission ------------------------------------------------------------
    async def admit(self, model: str):
        """The policy's alias `model` when the plugin serves it now; None when the request is not
        the plugin's (a plain model, or a model that has the alias's name); raises the client's
        error when the plugin stands aside or does not know the alias. A plain model name costs
        one dict lookup and one prefix test: the Router's groups are looked at only for alias
        requests (and in the background, _watch_router)."""
        rt = self.runtime
        ap = rt.policy.aliases.get(model) if rt is not None else None
        if ap is None:
            if not (_alias_like(model) or model in self._fault_names):
                return None
            router = _proxy_router()
            if _recognized(router, model) and model not in self._our_groups:
                return None  # the user's own model (or one LiteLLM matches) of that name
            if self.fault is not None:
                raise self.unavailable()
            self.observer.refused(model, "unknown_alias")
            raise http_error(400, f"unknown alias {model!r}; the aliases this proxy serves are: "
                             f"{', '.join(self.available_aliases()) or '(none)'}", "aisia_unknown_alias",
                             param="model", available=self.available_aliases())
        router = _proxy_router()
        if router is not None and self._mark(router) != self._router_mark:
            self.reconcile(router)  # the Router was rebuilt or changed since the groups were installed
        if self.fault is not None:
            if _recognized(router, model) and model not in self._our_groups:
                return None  # a model took the alias's name: the model keeps it
            raise self.unavailable()
        if not self._store_started:  # a request before the start-up task got to it
            await self._started()
            if self.fault is not None:
                raise self.unavailable()
        if model not in self._served_aliases:
            raise http_error(503, f"alias {model!r}: no deployment of this proxy is one of its candidates "
                             f"({ap.description})", "aisia_no_candidates", param="model")
        return ap

    def serves(self, model: str) -> bool:
        """Whether the alias `model` is installed as a Router group (a model that has its name
        keeps it otherwise)."""
        return model in self._served_aliases


def one_line_text(text: str) -> str:
    """A multi-line error as one log line (its lines joined by '; ')."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())
