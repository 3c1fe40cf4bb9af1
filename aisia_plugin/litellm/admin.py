"""The plugin's HTTP routes on the proxy's own FastAPI app, behind LiteLLM's own auth: LiteLLM's
``user_api_key_auth`` is the routes' FastAPI dependency (it reads the key from the headers it
declares, exactly as on LiteLLM's own routes, and resolves it: master key, virtual key, JWT,
``general_settings: custom_auth``), then the role check. A missing or refused key gets 401, a
valid key whose role is not proxy_admin 403. Feedback is the exception: any key LiteLLM accepts
may send it for the requests it made itself."""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Optional

import litellm
from fastapi import Depends, HTTPException, Request
from litellm.proxy._types import LitellmUserRoles, ProxyException
from litellm.proxy.auth.user_api_key_auth import user_api_key_auth

from ..deployments import describe
from ..numbers import within
from .layering import layers_of

if TYPE_CHECKING:
    from .host import PluginHost

log = logging.getLogger("aisia_plugin.litellm")

# Every route under /aisia/; /admin/bandit/stats is also served under the AISIA seed's name, and
# /admin/bandit/reset under the name it was first documented with.
ROUTES = ("/aisia/bandit/stats", "/aisia/bandit/reset", "/aisia/feedback", "/aisia/explain", "/aisia/policy",
          "/admin/bandit/stats", "/admin/bandit/reset")
KEY_HINT = "Authorization: Bearer <key>"
HEALTH_ROUTE = "/aisia/health"
# The routing page and the metrics (observability.py); mounted ahead of the proxy's catch-all routes too.
UI_ROUTES = ("/aisia/ui", "/aisia/ui/data", "/aisia/ui/login", "/aisia/ui/logout", "/aisia/metrics")


def _refuse(status: int, message: str) -> HTTPException:
    return HTTPException(status_code=status, detail={"error": {"message": message, "type": "aisia_auth_error"}})


async def _authenticate(kwargs: dict, hint: str = ""):
    """LiteLLM's auth on the arguments FastAPI resolved for it. A body LiteLLM cannot parse keeps
    LiteLLM's own 400 (it answers that before the auth's verdict, on its routes too); any other
    refusal is a 401, as LiteLLM's /metrics guard makes it (proxy/middleware/
    prometheus_auth_middleware.py): without a database LiteLLM answers a missing key with a 500
    and an unknown one with a 400 "No connected db."."""
    try:
        return await user_api_key_auth(**kwargs)
    except Exception as exc:
        if isinstance(exc, ProxyException) and exc.param == "request_body":
            raise
        if await kwargs["request"].body():
            await _json_object(kwargs["request"])  # LiteLLM's auth fails on JSON that is not an object: a 400 too
        presented = any(v for name, v in kwargs.items() if name != "request")
        # (also a known key LiteLLM's own route checks refuse here: those run for virtual keys, and
        # for custom_auth keys with general_settings.custom_auth_run_common_checks)
        refusal = "the proxy's auth refused this key" if presented else f"an API key is required ({KEY_HINT})"
        raise _refuse(401, refusal + hint) from None


@functools.wraps(user_api_key_auth)  # FastAPI reads LiteLLM's signature: its key headers, its Request
async def litellm_identity(**kwargs):
    """The request's identity as LiteLLM's auth resolves it (a ``UserAPIKeyAuth``)."""
    return await _authenticate(kwargs)


def is_admin(identity) -> bool:
    """Whether LiteLLM's auth resolved the request to the proxy_admin role (its master key among
    them)."""
    return getattr(identity, "user_role", None) in (LitellmUserRoles.PROXY_ADMIN, LitellmUserRoles.PROXY_ADMIN.value)


async def require_admin(identity=Depends(litellm_identity)):
    """The proxy admin only: a key LiteLLM resolves to the proxy_admin role (its master key among
    them). Any other role (internal_user, proxy_admin_viewer, ...) is refused with 403."""
    if not is_admin(identity):
        raise _refuse(403, "the proxy admin's key is required")
    return identity


async def _optional_identity(kwargs: dict):
    """LiteLLM's resolution of the key the request brings, or None (no key, or one it refuses):
    for a route anyone may read, that shows its proxy admin more."""
    if not any(v for name, v in kwargs.items() if name != "request"):
        return None
    try:
        return await user_api_key_auth(**kwargs)
    except Exception:
        return None


@functools.wraps(user_api_key_auth)
async def optional_identity(**kwargs):
    return await _optional_identity(kwargs)


async def feedback_caller(identity=Depends(litellm_identity)) -> Optional[str]:
    """Who may give feedback: the proxy admin for any served request (None), any other key
    LiteLLM accepts for the requests it made itself (its hash, ``tenancy.caller_key``)."""
    role = getattr(identity, "user_role", None)
    if role in (LitellmUserRoles.PROXY_ADMIN, LitellmUserRoles.PROXY_ADMIN.value):
        return None
    from .tenancy import caller_key

    key = caller_key(identity)
    if key is None:
        raise _refuse(401, "the proxy's auth resolved this key to no key")
    return key


def metrics_auth_required() -> bool:
    """LiteLLM's own rule for its /metrics: authenticated unless
    ``litellm_settings.require_auth_for_metrics_endpoint`` is false (the default, unset, is True)."""
    return getattr(litellm, "require_auth_for_metrics_endpoint", True) is not False


@functools.wraps(user_api_key_auth)
async def metrics_identity(**kwargs):
    """What LiteLLM's /metrics admits: any key its auth accepts, or anyone when the setting is off
    (then the key, if any, is still resolved: the proxy admin reads every metric)."""
    if not metrics_auth_required():
        return await _optional_identity(kwargs)
    return await _authenticate(kwargs, "; to let a scraper read the metrics without a key, as LiteLLM's /metrics, "
                                       "set litellm_settings.require_auth_for_metrics_endpoint: false")


def jsonable(value):
    """JSON without NaN or infinities (a never-tried arm's UCB score is infinite): those become
    the strings "inf", "-inf" and "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def _bad(status: int, message: str) -> HTTPException:
    return HTTPException(status_code=status, detail={"error": {"message": message, "type": "aisia_bad_request"}})


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def _json_object(request: Request) -> dict:
    try:
        body = await request.json()
    except Exception:
        raise _bad(400, "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise _bad(400, "the body must be a JSON object")
    return body


class RejectionBudget:
    """This process's budget of refusals (the sign-in form's wrong keys, which name no key to
    count them by): once ``burst`` refusals are spent (refilled at ``per_s``) a flood gets 429."""

    def __init__(self, burst: int = 50, per_s: float = 5.0):
        self.burst, self.per_s = float(burst), float(per_s)
        self.tokens, self.at = float(burst), time.monotonic()

    def spend(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.per_s)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class RefusalLimit:
    """Refused feedback (unknown, replayed or expired ids, bad scores, bodies that are not JSON)
    is counted per key in the state store, so every worker and replica sharing it counts the
    same: past ``per_window`` refusals within ``window_s`` of a key's first, that key's refusals
    answer 429 until its window ends, and one line says so (once per key and window, never a
    traceback). Another key's count is its own: one tenant's flood is no other's 429. Valid
    feedback is never limited: each served request takes one, once, so it cannot be amplified.
    While a shared store cannot be reached, each process counts on its own."""

    def __init__(self, plugin: "PluginHost", per_window: int = 100, window_s: float = 60.0):
        from ..state.memory import ExpiringCounts

        self.plugin, self.per_window, self.window_s = plugin, per_window, window_s
        self.local = ExpiringCounts(limit=10000)

    async def spend(self, key: str, reason: str) -> bool:
        """Count one refusal of `key` (a hash: tenancy.caller_key); False once past the budget."""
        name = "feedback-refused:" + key
        count = await self.plugin.runtime.store.count_up(name, self.window_s)
        if count is None:
            count = self.local.count_up(name, self.window_s)
        if count == self.per_window + 1:
            log.warning("aisia: the key hashed %s had %d feedback requests refused within %g s (the latest: %s); its "
                        "refused feedback answers 429 for the rest of the %g s", key, self.per_window, self.window_s,
                        reason[:120], self.window_s)
        return count <= self.per_window


def mount(app, plugin: "PluginHost") -> None:
    async def bandit_stats(format: str = "stats", _=Depends(require_admin)):
        store = plugin.runtime.store
        await store.prepare()  # a shared store: what every worker learned, as of its cache bound
        if format == "state":  # the whole state, as a snapshot holds it (`aisia explain --url`)
            return jsonable(store.dump())
        if format != "stats":
            raise _bad(422, "format must be 'stats' (the default) or 'state'")
        return jsonable(store.stats())

    async def bandit_reset(request: Request, _=Depends(require_admin)):
        body = await _json_object(request)
        dep = body.get("deployment_id")
        if not isinstance(dep, str) or not dep or len(dep) > 512 or not _utf8(dep):
            # (a lone surrogate cannot be sent to Redis: queued, it would block every later write)
            raise _bad(422, "deployment_id must be a deployment id (a non-empty UTF-8 string of at most 512 characters)")
        plugin.runtime.reset(dep)
        return {"reset": dep}

    async def explain(limit: int = 50, _=Depends(require_admin)):
        limit = max(1, min(int(limit), 1000))
        return {"decisions": jsonable(plugin.runtime.render_explain(limit))}

    async def policy(_=Depends(require_admin)):
        rt, watcher = plugin.runtime, plugin.watcher
        from litellm.proxy.proxy_server import llm_router

        return {"worker_pid": os.getpid(), "files": [str(f) for f in rt.loaded.files],
                # Each deployment as the router prices it (and from which source) and whether it is local.
                "deployments": [describe(d) for d in rt.deployments(llm_router.model_list if llm_router else [])],
                "aliases": plugin.available_aliases(),
                "aliases_without_candidates": list(plugin.empty_aliases),
                "layers": layers_of(rt.policy),  # the teams' and the keys' layers (docs/teams.md)
                "group_installs": plugin.group_installs, "reloads": watcher.reloads if watcher else 0, "checks": watcher.checks if watcher else 0,
                "rejected_edit": watcher.last_error if watcher else None,
                "restart_pending": watcher.restart_pending if watcher else []}

    mount_health(app, plugin)
    app.add_api_route("/aisia/policy", policy, methods=["GET"], include_in_schema=False)
    for prefix in ("/aisia", "/admin"):
        app.add_api_route(f"{prefix}/bandit/stats", bandit_stats, methods=["GET"], include_in_schema=False)
        app.add_api_route(f"{prefix}/bandit/reset", bandit_reset, methods=["POST"], include_in_schema=False)
    mount_feedback(app, plugin)
    app.add_api_route("/aisia/explain", explain, methods=["GET"], include_in_schema=False)
    _put_first(app)


def _put_first(app) -> None:
    """Our routes ahead of the first of the proxy's routes that would answer one of their paths
    (its catch-all pass-through routes), and behind every other: a request to any other path,
    /chat/completions included, is never matched against them first."""
    routes = app.router.routes
    paths = set(ROUTES) | set(UI_ROUTES) | {HEALTH_ROUTE}
    ours = [r for r in routes if getattr(r, "path", None) in paths]
    rest = [r for r in routes if getattr(r, "path", None) not in paths]
    at = next((i for i, r in enumerate(rest) if _claims(r, paths)), len(rest))
    routes[:] = rest[:at] + ours + rest[at:]


def _claims(route, paths) -> bool:
    """Whether `route` (Starlette's) matches a request for one of `paths`, in part or in full."""
    from starlette.routing import Match

    for path in paths:
        for method in ("GET", "POST"):
            scope = {"type": "http", "path": path, "root_path": "", "method": method, "headers": []}
            try:
                if route.matches(scope)[0] is not Match.NONE:
                    return True
            except Exception:  # a route that cannot read this scope does not claim it
                continue
    return False


def mount_feedback(app, plugin: "PluginHost") -> None:
    """POST /aisia/feedback: a client's score of one of its own served answers, quality evidence
    about the deployment that served it (docs/quality.md); refused requests limited per key."""
    refusals = RefusalLimit(plugin)

    async def feedback(request: Request, key: Optional[str] = Depends(feedback_caller),
                       identity=Depends(litellm_identity)):
        try:
            return await apply_feedback(request, key)
        except HTTPException as exc:
            from .tenancy import caller_key

            reason = str((exc.detail.get("error") or {}).get("message", "")) if isinstance(exc.detail, dict) else ""
            if exc.status_code < 500 and not await refusals.spend(caller_key(identity) or "-", reason):
                raise HTTPException(status_code=429, headers={"Retry-After": str(math.ceil(refusals.window_s))},
                                    detail={"error": {"message": "too many refused feedback requests from this key; "
                                                                 "retry later", "type": "aisia_rate_limited"}}) from None
            raise

    async def apply_feedback(request: Request, key: Optional[str]):
        body = await _json_object(request)
        rid, score = body.get("request_id"), within(body.get("score"), 0.0, 1.0)
        if not isinstance(rid, str) or not rid:
            raise _bad(422, "request_id must be the x-aisia-request-id of a served response")
        if score is None:  # (not a number, NaN, infinite, an int too large for a float, out of range)
            raise _bad(422, "score must be a number in [0, 1]")
        rt = plugin.runtime
        # (An id no store could hold is no served request's: not sent to Redis.)
        served = await rt.store.take_served(rid, key) if len(rid) <= 256 and _utf8(rid) else None
        if served is None:
            shown = rid if len(rid) <= 80 else rid[:77] + "..."
            # The same answer for another key's request as for an unknown one: nothing tells them apart.
            raise _bad(404, f"no served request {shown!r} awaits feedback from this key (unknown, expired, "
                            "feedback already given, or made with another key)")
        # The score is quality evidence about the serving deployment (docs/quality.md).
        alias, dep = served.get("alias"), served.get("deployment_id")
        recorded = rt.engine.record_quality(dep, alias, served.get("domain"), float(score), "feedback", key=key)
        if recorded is not None and plugin.observer is not None:
            plugin.observer.evidence(rid, dep, alias=alias, domain=served.get("domain"), source="feedback",
                                     value=recorded.value, weight=recorded.weight)
        return {"request_id": rid, "deployment_id": dep, "alias": alias,
                "reward": recorded.value if recorded is not None else None}

    app.add_api_route("/aisia/feedback", feedback, methods=["POST"], include_in_schema=False)


def mount_health(app, plugin: "PluginHost") -> None:
    """``GET /aisia/health``, without a key like LiteLLM's ``/health/liveliness``: 200
    ``healthy`` while the plugin serves its aliases as its policy files say, 200 ``degraded``
    while it serves them otherwise (an edit on disk rejected, the last good policy serving; a
    setting read at start only changed: reload.PolicyWatcher.differences), 503 ``unhealthy``
    while it stands aside (the proxy's plain models are served either way: probe liveness on
    LiteLLM's routes, not this one). The status alone, except for the proxy admin's key, which
    also reads why (the error names files and settings), the aliases and the worker."""
    from fastapi.responses import JSONResponse

    async def health(identity=Depends(optional_identity)):
        if plugin.fault is not None:
            status, code, detail = "unhealthy", 503, {"aliases": "refused with 503", "error": plugin.fault}
        else:
            differs = plugin.watcher.differences() if plugin.watcher is not None else []
            status, code = ("degraded" if differs else "healthy"), 200
            detail = {"aliases": plugin.available_aliases(), **({"degraded": differs} if differs else {})}
        if not is_admin(identity):  # the error names files and settings: the proxy admin's
            return JSONResponse({"status": status}, status_code=code)
        return JSONResponse({"status": status, **detail, "worker_pid": os.getpid()}, status_code=code)

    app.add_api_route(HEALTH_ROUTE, health, methods=["GET"], include_in_schema=False)


def mount_standing_aside(app, plugin: "PluginHost") -> None:
    """The routes of a plugin that stands aside: the health route, and every other route of
    the plugin answering 503 with the error (behind the same key checks)."""

    mount_health(app, plugin)

    def unavailable():
        return HTTPException(status_code=503, detail={"error": {"message": f"the aisia router is not serving: "
                                                                          f"{plugin.fault}", "type": "aisia_unavailable"}})

    async def admin_route(_=Depends(require_admin)):
        raise unavailable()

    async def metrics_route(_=Depends(metrics_identity)):
        raise unavailable()

    for path in ROUTES + UI_ROUTES:
        app.add_api_route(path, metrics_route if path == "/aisia/metrics" else admin_route, methods=["GET", "POST"],
                          include_in_schema=False)
    _put_first(app)
