"""Numbers from untrusted places (policies, stored state, outcomes, plugins) made safe for the
arithmetic of a decision: the one home of clamping."""

from __future__ import annotations

import math


def clamp01(x) -> float:
    """x clamped to [0, 1]; NaN and non-numbers count as 0 (+inf is 1, -inf 0)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return 0.0
    if not x > 0.0:  # also NaN
        return 0.0
    return 1.0 if x > 1.0 else x


def finite(x, default: float = 0.0) -> float:
    """x as a finite float (non-finite or non-numeric -> default; +inf -> default too)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return default
    return x if math.isfinite(x) else default
