"""Small, exact statistics for latency and lag series; no numpy, so tests can check by hand.

samples -> percentile (linear interpolation between closest ranks, numpy's default) ->
summary (p50/p95/p99/mean/max). Lag series (t, lag) -> slope by least squares (is the
backlog growing?) and the time until it is back at its baseline after a fault.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of `values`, interpolating between closest ranks."""
    if not values:
        raise ValueError("percentile of an empty sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99, mean and max, rounded to 0.01."""
    return {"p50": round(percentile(values, 50), 2), "p95": round(percentile(values, 95), 2),
            "p99": round(percentile(values, 99), 2),
            "mean": round(sum(values) / len(values), 2), "max": round(max(values), 2)}


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope dy/dt of (t, y) points; 0 for fewer than two distinct times."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mean_t) * (y - mean_y) for t, y in points) / var


def recovery_time(series: Sequence[tuple[float, float]], *, fault_t: float, threshold: float,
                  hold_s: float) -> float | None:
    """Seconds from `fault_t` until the value drops to <= `threshold` and stays there for
    `hold_s` (or until the series ends, if that is later than `hold_s` after it); None if it
    never does. Points must be in time order."""
    start: float | None = None
    for t, y in series:
        if t < fault_t:
            continue
        if y <= threshold:
            if start is None:
                start = t
            if t - start >= hold_s:
                return round(start - fault_t, 2)
        else:
            start = None
    if start is not None and series and series[-1][0] - start >= hold_s:
        return round(start - fault_t, 2)
    return None
