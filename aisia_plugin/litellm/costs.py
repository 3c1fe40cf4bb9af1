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
