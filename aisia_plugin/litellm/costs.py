"""Prices from LiteLLM's model cost map, as the cost lookup ``deployments.build_deployment`` takes."""

from __future__ import annotations

from typing import Optional

import litellm


def cost_lookup(model: str) -> Optional[tuple[float, float]]:
    """(input USD per token, output USD per token) of a LiteLLM model string, from
    ``litellm.model_cost`` (read at call time: LiteLLM may register prices from the config);
    the name with and without its provider prefix. None when the map does not know it."""
    table = litellm.model_cost
    names = [model]
    if "/" in model:
        names.append(model.split("/", 1)[1])
    for name in names:
        entry = table.get(name)
        if isinstance(entry, dict):
            inp, out = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
            if isinstance(inp, (int, float)) and not isinstance(inp, bool):
                return float(inp), float(out if isinstance(out, (int, float)) and not isinstance(out, bool) else inp)
    return None


def context_window(raw) -> Optional[int]:
    """The most input tokens a deployment takes, as LiteLLM's pre-call checks read it: the
    deployment's own ``model_info.max_input_tokens``, else LiteLLM's model info for its
    ``base_model`` or model. None when LiteLLM does not know."""
    info = raw.get("model_info") or {}
    params = raw.get("litellm_params") or {}
    value = info.get("max_input_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    for name in (info.get("base_model"), params.get("base_model"), params.get("model")):
        if not isinstance(name, str) or not name:
            continue
        try:
            found = litellm.get_model_info(name).get("max_input_tokens")
        except Exception:  # LiteLLM raises for a model its map does not know
            continue
        if isinstance(found, int) and not isinstance(found, bool) and found > 0:
            return found
    return None
