"""From LiteLLM deployment dicts (or replay candidates) to Deployments, and alias selectors.

Pure: LiteLLM's model cost map reaches here only as an optional lookup function supplied by the
integration, so the core never imports LiteLLM."""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from .decision import Deployment
from .globs import matches_any, most_specific
from .policy.models import Policy, Selector

# (litellm model string) -> (input USD per token, output USD per token) or None
CostLookup = Callable[[str], Optional[tuple[float, float]]]


def provider_of(model: str) -> str:
    """The seed's provider prefix: 'groq/llama-3' -> 'groq', 'cerebras-llama' -> 'cerebras'."""
    head = model.split("/", 1)[0] if "/" in model else model
    return head.split("-", 1)[0].lower()


def build_deployment(raw: Mapping, policy: Policy, cost_lookup: CostLookup | None = None) -> Deployment:
    """A LiteLLM deployment dict {model_name, litellm_params, model_info} as a Deployment."""
    params = raw.get("litellm_params") or {}
    info = raw.get("model_info") or {}
    model = str(params.get("model") or raw.get("model_name") or "")
    model_name = str(raw.get("model_name") or model)
    dep_id = str(info.get("id") or raw.get("id") or model_name)
    ann = annotation_for(policy, dep_id, model_name, model)
    provider = (ann.provider if ann and ann.provider else None) or str(params.get("custom_llm_provider") or "") or provider_of(model)
    tags = tuple(dict.fromkeys([*(params.get("tags") or []), *(ann.tags if ann else [])]))
    in_cost, out_cost = resolve_costs(policy, model, provider, params, info, ann, cost_lookup)
    return Deployment(
        id=dep_id,
        model_name=model_name,
        model=model,
        provider=provider,
        tier=ann.tier if ann else None,
        local=bool(ann.local) if ann else False,
        tags=tags,
        input_cost_per_1m=in_cost,
        output_cost_per_1m=out_cost,
        specialities=dict(ann.specialities) if ann else {},
    )


def annotation_for(policy: Policy, *names: str):
    key = most_specific(policy.deployments.keys(), names)
    return policy.deployments[key] if key is not None else None


def resolve_costs(policy, model, provider, params, info, ann, cost_lookup) -> tuple[float, float]:
    """Price per 1M tokens: the annotation, else the deployment's own per-token price, else
    LiteLLM's model cost map, else the provider-prefix table, else the default (seed: 2.0)."""
    if ann is not None and ann.input_cost_per_1m is not None:
        inp = ann.input_cost_per_1m
        out = ann.output_cost_per_1m if ann.output_cost_per_1m is not None else inp
        return inp, out
    for src in (info, params):
        if src.get("input_cost_per_token") is not None:
            inp = float(src["input_cost_per_token"]) * 1e6
            out = float(src.get("output_cost_per_token", src["input_cost_per_token"])) * 1e6
            return inp, out
    if cost_lookup is not None:
        found = cost_lookup(model)
        if found is not None:
            return found[0] * 1e6, found[1] * 1e6
    table = policy.costs.by_provider_prefix
    for key in (provider, provider_of(model)):
        if key in table:
            return table[key], table[key]
    return policy.costs.default_per_1m, policy.costs.default_per_1m


def selects(selector: Selector, d: Deployment) -> bool:
    """Whether an alias's candidate selector keeps this deployment."""
    names = (d.model_name, d.id, d.model)
    if selector.models and not matches_any(selector.models, (d.model_name,)):
        return False
    if selector.ids and not matches_any(selector.ids, (d.id,)):
        return False
    if selector.tags and not set(selector.tags) & set(d.tags):
        return False
    if selector.providers and d.provider not in selector.providers:
        return False
    if selector.tiers and d.tier not in selector.tiers:
        return False
    if selector.locality == "local" and not d.local:
        return False
    if selector.locality == "remote" and d.local:
        return False
    if selector.exclude and matches_any(selector.exclude, names):
        return False
    return True
