"""Weights of the rules strategy's 16 factors: normalisation and mode-pack resolution.

A mode pack replaces the policy's rules weights wholesale (docs/design.md#mode-packs): a factor the
pack does not list weighs 0. Every mapping returned here has exactly the keys of
``policy.models.FACTORS``."""

from __future__ import annotations

import math
from typing import Any, Mapping

from .schema_defaults import defaults_of
from .policy.models import FACTORS

# The 16 factors' default weights (docs/design.md#rules-the-16-factors; they sum to 1), as the
# schema's Weights defaults: used when a
# strategy is called without weights in its context (tests, plugins).
DEFAULT_WEIGHTS: dict[str, float] = {name: float(v) for name, v in defaults_of("Weights").items()}


def _clean(weights: Mapping[str, Any] | Any) -> dict[str, float]:
    """Every factor's weight as a finite number >= 0 (negative, non-finite or non-numeric -> 0)."""
    if hasattr(weights, "model_dump"):
        weights = weights.model_dump()
    out = {}
    for name in FACTORS:
        v = weights.get(name, 0.0) if weights else 0.0
        try:
            v = float(v)
        except (TypeError, ValueError):
            v = 0.0
        out[name] = v if math.isfinite(v) and v > 0 else 0.0
    return out


def normalise(weights: Mapping[str, float], fallback: Mapping[str, float] | None = None) -> dict[str, float]:
    """`weights` scaled to sum 1, keyed by every factor.

    Negative or non-finite weights count as 0; names that are not factors are ignored. When
    nothing positive remains, `fallback` (the policy's default rules weights) is normalised
    instead, and when that is unusable too, DEFAULT_WEIGHTS."""
    for candidate in (weights, fallback):
        if candidate is None:
            continue
        w = _clean(candidate)
        # Scaled by the largest first: weights near the float maximum (1e308) would overflow
        # their sum to inf and every share to 0.
        top = max(w.values())
        if top > 0:
            w = {k: v / top for k, v in w.items()}
            total = sum(w.values())
            return {k: v / total for k, v in w.items()}
    total = sum(DEFAULT_WEIGHTS.values())
    return {k: DEFAULT_WEIGHTS[k] / total for k in FACTORS}


def weights_for_alias(policy, alias_model) -> dict[str, float]:
    """The raw (not normalised) factor weights of an alias.

    The alias's mode pack, when it names one the policy defines, replaces the rules weights
    wholesale (unlisted factors 0); otherwise the policy's ``rules.weights``. An unknown pack
    name (the validator reports it) falls back to the rules weights."""
    pack_name = getattr(alias_model, "mode_pack", None)
    packs = getattr(policy, "mode_packs", None) or {}
    if pack_name and pack_name in packs:
        pack = packs[pack_name].weights
        return {name: float(pack.get(name, 0.0)) for name in FACTORS}
    rules = policy.rules.weights
    raw = rules.model_dump() if hasattr(rules, "model_dump") else dict(rules)
    return {name: float(raw.get(name, 0.0)) for name in FACTORS}
