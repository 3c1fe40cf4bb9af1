"""One attempt's decision, as the filter hook asks for it: the engine's choice among the healthy
deployments LiteLLM hands over (leaving out those tried or refused for the call, those at their
LiteLLM rate limit, and a half-open probe another request took), handed back to LiteLLM as ranked
copies (``litellm_params.order``, 1 = the choice)."""

from __future__ import annotations

import time
from typing import Optional

from ..decision import Decision
from ..engine import ALREADY_FAILED, PROBE_TAKEN, UNSUPPORTED, UnknownAlias
from ..local_first import left_out as off_this_side
from . import checks, compat
from .layering import left_out as not_for_this_caller
from .lifecycle import Call, Refused
from .runtime import Runtime


async def choose(rt: Runtime, observer, router, call: Call, healthy: list, messages: Optional[list], *,
                 tried: list, tools=None, client_timeout: bool = False, request=None) -> Decision:
    """The engine's decision for the call's next attempt (attempt number ``len(tried)``), over
    the `healthy` deployment dicts; raises Refused when none may serve (a strict budget, every
    candidate failed or at its rate limit, the alias gone from a reloaded policy). `router`: the
    Router the aliases were installed into (its usage-based limits are read). `client_timeout`:
    the request set its own timeout (blame.RequestFacts), so it takes no half-open probe.
    `request`: the request's keyword arguments, read for what it needs (capabilities.py)."""
    model, attempt = call.alias, len(tried)
    refused = call.refused_choices() if compat.FILTER_KEEPS_IDS_ONLY else []
    deps = rt.scopes.deployments(call.layer, healthy)  # as the call's layer sees them (layering.py)
    store, engine = rt.store, rt.scopes.engine(call.layer)
    await store.prepare([d.id for d in deps], model)
    # Left out of this decision, each with why (the explain log and the decision log say it).
    exclude = {i: ALREADY_FAILED for i in tried} if tried else {}
    narrowed = not_for_this_caller(rt, call.layer, model, healthy, call.tenant, call.limits)  # (a refusal when nothing is left)
    for i, why in narrowed.items():
        exclude.setdefault(i, why)
    for i in refused:
        exclude.setdefault(i, "LiteLLM's checks after the filter refused it")
    if call.local_first is not None:  # local-first: one side of the alias (docs/local-first.md)
        for i, why in off_this_side(deps, call.local_first.side, exclude).items():
            exclude.setdefault(i, why)
    limited = await checks.over_usage_limits(router, healthy, messages)
    if limited:
        if all(d.id in limited or d.id in exclude for d in deps):
            raise Refused(429, f"alias {model!r}: every candidate is at its LiteLLM rate limit: "
                          + "; ".join(f"{i} {why}" for i, why in limited.items()),
                          "aisia_rate_limited", model, call.tried)
        exclude.update((i, f"at its LiteLLM rate limit: {why}") for i, why in limited.items() if i not in exclude)
    started = time.perf_counter()
    while True:
        try:
            decision = engine.decide(model, messages or [], deps, tools=tools, exclude=exclude, reserve=False,
                                     session=call.session, team=call.pace, request=request,
                                     max_cost_usd=call.limits.max_cost_usd if call.limits is not None else None)
        except UnknownAlias:  # the policy was reloaded without it between the hooks
            raise Refused(404, f"alias {model!r} is no longer defined by the policy", "aisia_unknown_alias", model)
        if decision.refused is not None:
            observer.decided(call, decision, attempt, time.perf_counter() - started)
            entry = rt.explain_entry(call, decision, attempt, tried)
            entry["outcome"] = {"refused": decision.refused}
            if decision.refused in ("no_candidates", UNSUPPORTED) and call.tried:
                raise call.exhausted()
            if decision.refused == UNSUPPORTED and _capable_elsewhere(rt, router, model, messages, tools, request):
                raise Refused(503, f"alias {model!r}: the candidates that can take this request are unavailable "
                              f"now (LiteLLM cools them down); {decision.reason}", "aisia_no_candidates", model)
            raise Refused(decision.status_code, f"alias {model!r}: {decision.reason}", f"aisia_{decision.refused}",
                          model, call.tried)
        if decision.probe and (client_timeout or not await store.reserve_probe_shared(
                decision.deployment_id, engine.clock(), engine.breaker)):
            # Another request took the last probe slot; or this request set its own timeout,
            # and a probe is only given to a request that could succeed (docs/failures.md).
            exclude[decision.deployment_id] = (
                "half-open: its probe is kept for a request without a timeout of its own" if client_timeout
                else PROBE_TAKEN)
            continue
        observer.decided(call, decision, attempt, time.perf_counter() - started, messages, tools)
        return decision


def _capable_elsewhere(rt: Runtime, router, alias: str, messages, tools, request) -> bool:
    """Whether a deployment of the alias that LiteLLM did not hand the filter (cooling down) can
    take the request the healthy ones cannot: then it is no 400 (docs/capabilities.md)."""
    everyone = getattr(router, "model_list", None) if router is not None else None
    if not everyone:
        return False
    wider = rt.engine.decide(alias, messages or [], rt.deployments(everyone), tools=tools, reserve=False,
                             request=request)
    return wider.refused != UNSUPPORTED


def handed_to_litellm(healthy: list, ranked: list, decision: Decision) -> list:
    """What the filter returns: every ranked candidate as a copy ordered by rank (LiteLLM's
    later checks may drop one, its order filter then sends the best left); where LiteLLM keeps
    only the ids (compat), the choice alone, as LiteLLM configured it."""
    if compat.FILTER_KEEPS_IDS_ONLY:
        return [d for d in healthy if str((d.get("model_info") or {}).get("id")) == ranked[0]][:1] or healthy
    return ranked_deployments(healthy, ranked, decision)


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


def ranked_deployments(healthy: list, ranked: list, decision) -> list:
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
