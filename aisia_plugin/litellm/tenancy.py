"""Who a request's tenant is, and what the request itself may ask within it (docs/teams.md).

``Tenant`` is read from LiteLLM's ``UserAPIKeyAuth`` only: what LiteLLM's auth resolved the key
to (its database, or a ``custom_auth`` function), never from anything the request carries, so a
client cannot claim another team or select a layer. ``RequestLimits`` is what the request may ask
per call (a minimum tier, a maximum cost), read from its headers or its metadata and validated:
a bad value is the caller's 400, never ignored; they can only narrow the key's candidates."""

from __future__ import annotations

import hashlib
import math
from typing import Mapping, NamedTuple, Optional, Union

from ..policy.layers import TIER_ORDER
from .events import is_mapping

# The key metadata field naming the key's layer (policy `layers:`), set by whoever issues keys.
KEY_LAYER_FIELD = "aisia_policy"
# LiteLLM's names for "every model" in a key's or a team's models list.
ALL_MODELS = frozenset(("*", "all-proxy-models", "all-team-models"))
ADMIN_ROLES = frozenset(("proxy_admin",))

MIN_TIER_HEADER = "x-aisia-min-tier"
MAX_COST_HEADER = "x-aisia-max-cost-usd"
MIN_TIER_FIELD = "aisia_min_tier"  # the same, in the request's metadata
MAX_COST_FIELD = "aisia_max_cost_usd"


def session_key(value: str) -> str:
    """A session as stored: hashed, so that an API key used as the session never sits in the
    store or the explain log."""
    return hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:20]


# LiteLLM's hash of a key (``token``) -> ours: every request of a key hashes the same value.
# Only the token is kept, never a raw ``api_key``; bounded (cleared when full).
_CALLERS: dict = {}
_MAX_CALLERS = 4096


def caller_key(user_api_key_auth) -> Optional[str]:
    """The API key behind a request or a feedback, as stored beside a served request: hashed
    (LiteLLM's own hash of it, ``token``, hashed again), never the key."""
    token = getattr(user_api_key_auth, "token", None)
    if token and type(token) is str:
        hit = _CALLERS.get(token)
        if hit is None:
            if len(_CALLERS) >= _MAX_CALLERS:
                _CALLERS.clear()
            hit = _CALLERS[token] = session_key(token)
        return hit
    value = token or getattr(user_api_key_auth, "api_key", None)
    return session_key(str(value)) if value else None


class Tenant(NamedTuple):
    """The tenant of a request: its LiteLLM team (id and alias), the hash of its key
    (caller_key), the layer its key's metadata names (``aisia_policy``), the models it
    may use (the key's list, else its team's; empty: any), and whether it is the proxy admin.
    (A NamedTuple: one is made per request, at a third of a frozen dataclass's cost.)"""

    team_id: Optional[str] = None
    team_alias: Optional[str] = None
    key_hash: Optional[str] = None
    key_layer: Optional[str] = None
    models: tuple[str, ...] = ()
    admin: bool = False

    @property
    def team(self) -> Optional[str]:
        """The tenant's team as its figures are labelled (docs/teams.md): its id, else its alias."""
        return self.team_id or self.team_alias


def _text(value) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def tenant_of(user_api_key_dict) -> Tenant:
    """The Tenant LiteLLM's auth resolved a request's key to (absent fields: none)."""
    meta = getattr(user_api_key_dict, "metadata", None)
    layer = meta.get(KEY_LAYER_FIELD) if is_mapping(meta) else None
    models = getattr(user_api_key_dict, "models", None) or getattr(user_api_key_dict, "team_models", None) or ()
    if models:  # (most keys: none listed)
        models = tuple(str(m) for m in models if isinstance(m, str))
        if any(m in ALL_MODELS for m in models):
            models = ()
    role = getattr(user_api_key_dict, "user_role", None)
    role = str(getattr(role, "value", role) or "")
    return Tenant(_text(getattr(user_api_key_dict, "team_id", None)),
                  _text(getattr(user_api_key_dict, "team_alias", None)), caller_key(user_api_key_dict),
                  str(layer) if layer not in (None, "") else None, models, role in ADMIN_ROLES)


def tenant_from_metadata(team: Optional[str], key_metadata: Optional[Mapping], models=()) -> Tenant:
    """A Tenant as `aisia explain --team NAME --key-metadata JSON` describes one: the team named
    by id or alias (both are tried, as for a request)."""
    layer = (key_metadata or {}).get(KEY_LAYER_FIELD)
    return Tenant(team, team, None, str(layer) if layer not in (None, "") else None, tuple(models))


class RequestLimits(NamedTuple):
    """What one request asks within its key's layer: the lowest tier it accepts, the most it
    accepts to pay (estimated, USD). None: not asked."""

    min_tier: Optional[str] = None
    max_cost_usd: Optional[float] = None


NO_LIMITS = RequestLimits()  # a request that asks nothing


class LimitProblem(NamedTuple):
    """A request limit that cannot be read: the caller's 400."""

    param: str
    message: str


def _headers(data: Mapping) -> dict:
    """The request's headers by lower-case name (the first of a name repeated in other cases)."""
    out = {}
    for k, v in ((data.get("proxy_server_request") or {}).get("headers") or {}).items():
        if isinstance(k, str):
            out.setdefault(k.lower(), v)
    return out


def _asked(headers: dict, metadata: list, header: str, field: str):
    """(where, value) of a limit: the request's header (`headers`, ``_headers``), else its
    `metadata` (its mappings, ``metadata`` then ``litellm_metadata``); (None, None)."""
    if header in headers:
        return header, headers[header]
    for meta in metadata:
        if meta.get(field) is not None:
            return f"metadata.{field}", meta[field]
    return None, None


def request_limits(data: Mapping) -> Union[RequestLimits, LimitProblem]:
    """The request's limits, or the problem with one of them."""
    # The headers and the metadata read once for both limits.
    headers = _headers(data)
    metadata = [m for m in (data.get("metadata"), data.get("litellm_metadata")) if is_mapping(m)]
    where, tier = _asked(headers, metadata, MIN_TIER_HEADER, MIN_TIER_FIELD)
    if where is not None:
        tier = str(tier).strip().lower()
        if tier not in TIER_ORDER:
            return LimitProblem(where, f"{where} must be one of {', '.join(TIER_ORDER)} (the lowest tier the "
                                       f"request accepts); got {str(tier)[:40]!r}")
    cost_where, cost = _asked(headers, metadata, MAX_COST_HEADER, MAX_COST_FIELD)
    if cost_where is not None:
        try:
            cost = float(cost) if not isinstance(cost, bool) else math.nan
        except (TypeError, ValueError):
            cost = math.nan
        if not math.isfinite(cost) or cost <= 0:
            return LimitProblem(cost_where, f"{cost_where} must be a number of USD above 0 (the most the request "
                                            "accepts to pay, estimated before the call)")
    if where is None and cost_where is None:
        return NO_LIMITS
    return RequestLimits(tier if where is not None else None, cost if cost_where is not None else None)
