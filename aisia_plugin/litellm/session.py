"""Signing in to the routing page as LiteLLM's own UI does (proxy_server.py ``login``): a form
posts the key once, and the answer sets a session cookie. No key is ever read from a URL, where
it would land in access logs, proxy logs and browser history.

The cookie (``aisia_session``) is HttpOnly, SameSite=Strict, scoped to the page's path, Secure
over HTTPS, and expires after ``SESSION_S``. Its value is the key, its expiry and a random
session id sealed with LiteLLM's own helper for its login tokens (``encrypt_bearer_token``:
AES-256-GCM under ``LITELLM_SALT_KEY``, else the master key, with our prefix as the associated
data, so that no token of another kind opens as ours), so the browser never holds the key in
clear and every worker can open it. The seal also holds who signed in: the role (``admin`` or
``team``) and the team (page_view.Viewer); a client cannot alter either without breaking the
seal, and a request whose key LiteLLM now resolves to another role or team is refused
(page_view.page_viewer): sign in again. The page's routes present the opened key to LiteLLM's auth
as the request's ``Authorization`` header (a header the request brings wins), so the cookie
grants exactly what the key grants now: a revoked key or a changed role ends the session at once.

Signing out revokes the session on the server, not only in the browser: its id is counted in the
state store (``count_up``: shared by every worker and replica with ``state.backend: redis``)
until the cookie would have expired, and every read of a cookie asks the store first. A store
that cannot answer refuses the cookie (the page asks to sign in again; an Authorization header
still works): a copied cookie must never outlive a sign-out because Redis was away."""

from __future__ import annotations

import json
import logging
import math
import secrets
import time
from typing import NamedTuple, Optional

from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute

from ..ui import signin_html
from .admin import RejectionBudget
from .page_view import ROLES, SESSION_SCOPE, Viewer, page_viewer

PAGE = "/aisia/ui"
SIGN_IN = PAGE + "/login"
SIGN_OUT = PAGE + "/logout"
COOKIE = "aisia_session"
SESSION_S = 8 * 3600
NO_STORE = {"Cache-Control": "no-store"}

log = logging.getLogger("aisia_plugin.litellm")


# The sealed value's prefix, also its AES-GCM associated data: LiteLLM's own login tokens
# (``litellm_login_``) and ours cannot be read as one another.
SEAL_PREFIX = "aisia_session_"


class Session(NamedTuple):
    key: str  # the API key signed in with
    expires: int  # Unix time
    id: str  # random: what a sign-out revokes
    role: str = "admin"  # who signed in: page_view.ROLES
    team: Optional[str] = None  # the team of a "team" session


def seal(key: str, now: float, viewer: Viewer) -> str:
    from litellm.proxy.common_utils.encrypt_decrypt_utils import encrypt_bearer_token

    opened = {"key": key, "exp": math.floor(now + SESSION_S), "sid": secrets.token_urlsafe(16),
              "role": viewer.role, "team": viewer.team}
    return encrypt_bearer_token(json.dumps(opened), SEAL_PREFIX)


def _well_formed(key, exp, sid, role, team, now: float) -> bool:
    return (isinstance(key, str) and bool(key) and isinstance(exp, int) and now < exp and isinstance(sid, str)
            and bool(sid) and role in ROLES and (team is None if role == "admin" else isinstance(team, str) and bool(team)))


def unseal(value: str, now: float) -> Optional[Session]:
    """The session sealed in a cookie, or None (not ours, tampered with, sealed under another
    salt or master key, or expired). Revocation is the store's: ``revoked``."""
    from litellm.proxy.common_utils.encrypt_decrypt_utils import decrypt_bearer_token

    try:
        opened = json.loads(decrypt_bearer_token(value, SEAL_PREFIX) or "")
        fields = opened["key"], opened["exp"], opened["sid"], opened["role"], opened["team"]
    except (ValueError, TypeError, KeyError):
        return None  # (a session sealed before roles were sealed too: signed in again)
    return Session(*fields) if _well_formed(*fields, now) else None


def _revoked_name(session: Session) -> str:
    return "session-revoked:" + session.id


async def revoke(store, session: Session, now: float) -> bool:
    """Put the session on the store's revocation list until its cookie would have expired; False
    when the store cannot be reached (the caller says so)."""
    return await store.count_up(_revoked_name(session), session.expires - now + 1.0) is not None


async def revoked(store, session: Session) -> bool:
    """Whether the session was signed out (or cannot be known not to be: the store is away)."""
    count = await store.counted(_revoked_name(session))
    return count is None or count > 0


def _root(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/")


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def _presenting(request: Request, key: str, session: Optional[Session] = None) -> Request:
    """The same request with ``key`` as its Authorization header and no body: what LiteLLM's auth
    reads then (the sign-in form's body, which holds the key, never reaches LiteLLM's request
    parsing or its logs); `session`, the cookie's, kept in its scope for page_view.page_viewer."""
    try:
        header = ("Bearer " + key).encode("latin-1")
    except UnicodeEncodeError:
        header = b"Bearer -"  # no key has such characters: refused as any unknown key is
    drop = (b"authorization", b"content-type", b"content-length")
    headers = [(k, v) for k, v in request.scope["headers"] if k.lower() not in drop]
    scope = {k: v for k, v in request.scope.items() if k != "parsed_body"}
    scope["headers"] = headers + [(b"authorization", header)]
    scope[SESSION_SCOPE] = session

    async def no_body():
        return {"type": "http.request", "body": b"", "more_body": False}

    return Request(scope, no_body)


class SessionRoute(APIRoute):
    """The routing page and its data: a ``?key=`` is refused unread (a redirect to the sign-in
    form, which does not echo it); the session cookie, when the request brings no Authorization
    header and its session is not revoked, becomes one; a browser whose key is refused is sent to
    the sign-in form. ``page_route(plugin)`` gives the class bound to the plugin whose store
    holds the revocation list."""

    plugin = None

    async def presented(self, request: Request) -> Optional[tuple[str, Optional[Session]]]:
        """(the key to present, the session it comes from), or None: the request as it came."""
        if request.headers.get("authorization"):
            return None
        sealed = request.cookies.get(COOKIE)
        session = unseal(sealed, time.time()) if sealed else None
        if session is None or await revoked(self.plugin.runtime.store, session):
            return None
        return session.key, session

    async def refused(self, request: Request, exc: HTTPException) -> Response:
        if request.method == "GET" and _wants_html(request):
            return RedirectResponse(_root(request) + SIGN_IN, status_code=303, headers=NO_STORE)
        raise exc

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def with_session(request: Request) -> Response:
            if "key" in request.query_params:
                return RedirectResponse(_root(request) + SIGN_IN + "?refused=url", status_code=303, headers=NO_STORE)
            presented = await self.presented(request)
            try:
                return await handler(_presenting(request, *presented) if presented is not None else request)
            except HTTPException as exc:
                if exc.status_code not in (401, 403):
                    raise
                return await self.refused(request, exc)

        return with_session


class SignInRoute(SessionRoute):
    """The sign-in form's POST: its ``key`` field is presented to LiteLLM's auth as the page's
    cookie would be. Refusals show the form again (with 401 or 403, never the key), and once
    ``RejectionBudget`` is spent a flood of wrong keys gets 429."""

    failures = RejectionBudget(burst=20, per_s=0.5)

    async def presented(self, request: Request) -> Optional[tuple[str, Optional[Session]]]:
        form = await request.form()
        key = form.get("key")
        return (key.strip() if isinstance(key, str) else ""), None

    async def refused(self, request: Request, exc: HTTPException) -> Response:
        if not self.failures.spend():
            return HTMLResponse(signin_html("Too many refused sign-ins: try again in a minute."), status_code=429,
                                headers={"Retry-After": "60", **NO_STORE})
        message = ("This key is neither the proxy admin's nor a LiteLLM team's." if exc.status_code == 403
                   else "This key was refused: use the proxy's master key, a proxy_admin key or a team's key.")
        return HTMLResponse(signin_html(message), status_code=exc.status_code, headers=NO_STORE)


def _cookie_attributes(request: Request) -> dict:
    https = request.url.scheme == "https" or request.headers.get("x-forwarded-proto", "").lower() == "https"
    return {"path": _root(request) + PAGE, "httponly": True, "samesite": "strict", "secure": https}


def page_route(plugin) -> type:
    """``SessionRoute`` reading the revocation list of `plugin`'s store."""
    return type("SessionRoute", (SessionRoute,), {"plugin": plugin})


def mount(app, plugin) -> None:
    """GET and POST ``/aisia/ui/login`` (the form, then the cookie), POST ``/aisia/ui/logout``
    (the session revoked in `plugin`'s store, the cookie deleted)."""

    async def sign_in_form(refused: str = ""):
        note = "Keys in the page's address are not accepted: sign in here instead." if refused == "url" else ""
        return HTMLResponse(signin_html(note), headers=NO_STORE)

    async def sign_in(request: Request, viewer: Viewer = Depends(page_viewer)):
        # The request here is the one SignInRoute made: the form's key is its Authorization header.
        key = request.headers["authorization"][len("Bearer "):]
        response = RedirectResponse(_root(request) + PAGE, status_code=303, headers=NO_STORE)
        response.set_cookie(COOKIE, seal(key, time.time(), viewer), max_age=SESSION_S, **_cookie_attributes(request))
        return response

    async def sign_out(request: Request):
        now = time.time()
        sealed = request.cookies.get(COOKIE)
        session = unseal(sealed, now) if sealed else None
        if session is not None and not await revoke(plugin.runtime.store, session, now):
            # Still deleted from this browser; a copy elsewhere is refused only while the store
            # is away (revoked()), and would be read again once it is back: said, not hidden.
            log.warning("aisia: a routing-page sign-out could not reach the state store to revoke its session: "
                        "copies of that cookie are refused while the store is unreachable, then read again "
                        "until %s", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(session.expires)))
        response = RedirectResponse(_root(request) + SIGN_IN, status_code=303, headers=NO_STORE)
        response.delete_cookie(COOKIE, **_cookie_attributes(request))
        return response

    app.router.add_api_route(SIGN_IN, sign_in_form, methods=["GET"], include_in_schema=False)
    app.router.add_api_route(SIGN_IN, sign_in, methods=["POST"], include_in_schema=False,
                             route_class_override=SignInRoute)
    app.router.add_api_route(SIGN_OUT, sign_out, methods=["POST"], include_in_schema=False)
