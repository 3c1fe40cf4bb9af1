"""Numbers from untrusted places (policies, stored state, outcomes, plugins) made safe for the
arithmetic of a decision: the one home of clamping."""

from __future__ import annotations

import math
from typing import Optional


def clamp01(x) -> float:
    """x clamped to [0, 1]; NaN and non-numbers count as 0 (+inf is 1, -inf 0, and so are
    integers too large for a float)."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return 0.0
    except OverflowError:  # an int of hundreds of digits: compared exactly, without converting it
        return 1.0 if x > 0 else 0.0
    if not x > 0.0:  # also NaN
        return 0.0
    return 1.0 if x > 1.0 else x


def finite(x, default: float = 0.0) -> float:
    """x as a finite float (non-finite or non-numeric -> default; +inf -> default too)."""
    try:
        x = float(x)
    except (TypeError, ValueError, OverflowError):
        return default
    return x if math.isfinite(x) else default


def within(x, lo: float, hi: float) -> Optional[float]:
    """x as a float when it is a number (an int or a float, not a bool) in [lo, hi], else None:
    what a request body's number is checked with. The bounds are checked before any conversion
    (Python compares an int with a float exactly), so an int too large for a float (a JSON
    number of 4,000 digits) is out of range, never an OverflowError; NaN is in no range."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    if not lo <= x <= hi:
        return None
    return float(x)
