"""Which policy decides a request, and among which deployments (docs/teams.md).

A request's tenant (tenancy.Tenant, from LiteLLM's auth) selects a layer of the policy
(policy/layers.layer_for): its key's named layer, else its team's, else none (the operator's
policy). Each layer decides with an engine of its own over the one shared store: what is learned
of the deployments (health, quality) is everyone's, the layer's aliases, budgets and reward
weights are its own. Before a decision, the deployments the request may not use are left out,
each with why: those the operator's selector for the alias does not keep (a layer narrows, never
widens), those outside the key's ``models``, and those below the request's minimum tier; the
request's maximum cost is the engine's (``Engine.decide(max_cost_usd=...)``)."""

from __future__ import annotations

import time
from typing import Optional

from ..decision import Deployment
from ..deployments import build_deployment, selects
from ..engine import Engine
from ..policy.layers import LayerRef, layer_for, narrows
from ..policy.layers import left_out as narrowed
from ..policy.models import Policy
from .costs import litellm_price, with_context_window
from .lifecycle import Refused
from .team_budget import team_pace_of
from .tenancy import NO_LIMITS, LimitProblem, RequestLimits, Tenant, request_limits, tenant_of


class Scopes:
    """Per layer of the runtime's policy, its engine and its view of the deployments, built at
    first use and dropped when the policy is swapped (a hot reload)."""

    def __init__(self, runtime):
        self.runtime = runtime
        self._engines: dict[LayerRef, Engine] = {}
        self._views: dict[LayerRef, dict] = {}

    def clear(self) -> None:
        self._engines.clear()
        self._views.clear()

    def layer_of(self, tenant: Optional[Tenant], alias: str = "?") -> Optional[LayerRef]:
        """The tenant's layer (None: the operator's policy). A key naming a layer the policy does
        not declare is refused (403): serving it by another policy would ignore its setting."""
        if tenant is None:
            return None
        layers = self.runtime.loaded.layers
        ref = layer_for(layers, tenant.team_id, tenant.team_alias, tenant.key_layer)
        if ref is None and tenant.key_layer:
            declared = ", ".join(sorted(r.name for r in layers if r.section == "layers")) or "none"
            raise Refused(403, f"the key's metadata names aisia_policy {tenant.key_layer!r}, a layer the policy "
                          f"does not declare (declared layers: {declared})", "aisia_unknown_layer", alias)
        return ref

    def policy(self, ref: Optional[LayerRef]) -> Policy:
        """The layer's policy; the operator's for None, or for a layer a reload removed."""
        layers = self.runtime.loaded.layers
        return self.runtime.policy if ref is None or ref not in layers else layers[ref]

    def engine(self, ref: Optional[LayerRef]) -> Engine:
        """The layer's engine; the operator's for None, or for a layer a reload removed."""
        if ref is None or ref not in self.runtime.loaded.layers:
            return self.runtime.engine
        hit = self._engines.get(ref)
        if hit is None:
            hit = self._engines[ref] = self.runtime.new_engine(self.runtime.loaded.layers[ref])
        return hit

    def deployments(self, ref: Optional[LayerRef], raws) -> list[Deployment]:
        """The deployments as the layer sees them: the operator's views, unless the layer
        annotates deployments itself."""
        section = getattr(self.runtime.policy, ref.section).get(ref.name) if ref is not None else None
        if section is None or not section.deployments or ref not in self.runtime.loaded.layers:
            return self.runtime.deployments(raws)
        policy, views = self.policy(ref), self._views.setdefault(ref, {})
        out = []
        for raw in raws:
            info = raw.get("model_info") or {}
            key = str(info.get("id") or raw.get("model_name") or "")
            hit = views.get(key)
            if hit is None or hit[0] is not info:
                if len(views) > 4096:
                    views.clear()
                hit = views[key] = (info, with_context_window(build_deployment(raw, policy, litellm_price), raw))
            out.append(hit[1])
        return out


def left_out(runtime, ref: Optional[LayerRef], alias: str, raws, tenant: Optional[Tenant],
             limits: Optional[RequestLimits]) -> dict:
    """id -> why, of the deployments this request may not use (policy/layers.left_out); raises
    the refusal (``refusal``) when they are every candidate the deciding alias has."""
    models = tenant.models if tenant is not None else ()
    min_tier = limits.min_tier if limits is not None else None
    if not narrows(ref, models, min_tier):
        return {}
    views = runtime.scopes.deployments(ref, raws)
    out = narrowed(alias, ref, runtime.policy.aliases.get(alias), runtime.deployments(raws), views, models, min_tier)
    ap = runtime.scopes.policy(ref).aliases.get(alias)
    if out and ap is not None:
        candidates = [d.id for d in views if selects(ap.candidates, d)]
        if candidates and all(i in out for i in candidates):
            raise refusal(alias, {i: out[i] for i in candidates})
    return out


def refusal(alias: str, why: dict) -> Refused:
    """Every deployment was left out for the request (left_out): the key's or the request's
    limits leave nothing, said as such (403: the key may use none; 400: the request asked too much)."""
    reasons = sorted(set(why.values()))
    asked = any("minimum tier" in r for r in reasons)
    return Refused(400 if asked else 403, f"alias {alias!r}: no deployment is left for this request: "
                   + "; ".join(reasons), "aisia_request_limits" if asked else "aisia_key_models", alias)


def scope_call(runtime, call, user_api_key_dict, data) -> Optional[Refused]:
    """The call's tenant, whose spend it paces, the layer that decides it and the request's
    limits, from the pre-call hook; a limit that cannot be read or a key naming an undeclared layer: the refusal to answer."""
    call.tenant = tenant = tenant_of(user_api_key_dict)
    call.key = tenant.key_hash  # who may give feedback for it
    call.pace = team_pace_of(user_api_key_dict, time.time())  # whose spend it paces (team_budget.py)
    limits = request_limits(data)
    if isinstance(limits, LimitProblem):
        return Refused(400, limits.message, "invalid_request_error", call.alias)
    call.limits = limits if limits != NO_LIMITS else None
    try:
        call.layer = runtime.scopes.layer_of(tenant, call.alias)
    except Refused as exc:
        return exc
    return None


def layers_of(policy: Policy) -> list[dict]:
    """The policy's layers as written (/aisia/policy lists them): section, name, description and
    the sections it sets."""
    return [{"section": section, "name": name, **layer.model_dump()}
            for section in ("teams", "layers") for name, layer in getattr(policy, section).items()]
