"""Who reads the routing page (``/aisia/ui``), and as whom (docs/security.md, docs/teams.md).

The proxy admin (LiteLLM's ``proxy_admin`` role, its master key among them) reads everything, as
on every plugin route. A key of a LiteLLM team (any other role) reads its own team's view: its
team's decisions and outcomes per alias and deployment, its team's latest decisions and the
policy layer that decides its requests, nothing of another team and none of the per-deployment
learning. Any other key is refused (403).

Who a viewer is comes from LiteLLM's auth only (tenancy.tenant_of), never from the request. A
session cookie (session.py) also seals the role and the team it was signed in as: when LiteLLM's
auth now resolves its key to another role or team, the session is refused (401: sign in again),
so a session never reads a view it was not signed in for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fastapi import Depends, Request

from .admin import _refuse, is_admin, litellm_identity
from .tenancy import Tenant, tenant_of

ROLES = ("admin", "team")
# Where session.SessionRoute leaves the cookie's opened session in the request's scope.
SESSION_SCOPE = "aisia.session"


@dataclass(frozen=True)
class Viewer:
    """A reader of the routing page: the proxy admin (``team`` None), or a team's key."""

    admin: bool
    team: Optional[str] = None  # the team as its figures are labelled (Tenant.team)
    tenant: Optional[Tenant] = None

    @property
    def role(self) -> str:
        return "admin" if self.admin else "team"


def viewer_of(identity) -> Optional[Viewer]:
    """The Viewer LiteLLM's resolution of a key makes, or None (a key of no team: no view)."""
    if is_admin(identity):
        return Viewer(True)
    tenant = tenant_of(identity)
    return Viewer(False, tenant.team, tenant) if tenant.team else None


async def page_viewer(request: Request, identity=Depends(litellm_identity)) -> Viewer:
    """The routing page's dependency: the request's Viewer; 403 for a key of no team, 401 for a
    session signed in as another role or team than its key has now."""
    viewer = viewer_of(identity)
    if viewer is None:
        raise _refuse(403, "the proxy admin's key or a key of a LiteLLM team is required")
    session = request.scope.get(SESSION_SCOPE)
    if session is not None and (session.role, session.team) != (viewer.role, viewer.team):
        raise _refuse(401, "this session was signed in as another role or team than its key has now: sign in again")
    return viewer
