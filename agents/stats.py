"""Confidence intervals over seeds (Student's t), without a SciPy dependency, and the evenly
spaced sample a long series is thinned to."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; beyond, the
# Cornish-Fisher expansion in 1/dof (below).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959963984540054      # the standard normal's 0.975 quantile


def t95(dof: int) -> float:
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    if dof <= len(_T95):
        return _T95[dof - 1]
    # The normal quantile 1.96 was used here, but t(0.975, 31) is 2.040 and t(0.975, 60) 2.000:
    # an interval over 32-100 values (seeds x pooled training runs) came out 2-4% too narrow.
    # Student's t quantile as the Cornish-Fisher series in 1/dof around the normal's z: with
    # four terms it is within 1e-4 of the exact quantile from 10 degrees of freedom on.
    z, n = _Z975, float(dof)
    return (z + (z**3 + z) / (4 * n) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * n**4))


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval (NaN half-width for one value)."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("mean_ci95 needs at least one value")
    mean = float(np.mean(arr))
    if arr.size < 2:
        return mean, float("nan")
    return mean, float(t95(arr.size - 1) * np.std(arr, ddof=1) / np.sqrt(arr.size))


def evenly_spaced(n: int, k: int) -> np.ndarray:
    """The indices of `k` items evenly spaced over `n` (`k` >= 2), the first (0) and the last
    (n - 1) among them, increasing; all `n` where n <= k. The same at each call: a curve of
    more points than a plot shows thinned alike at every read."""
    if n <= k:
        return np.arange(n)
    # spaced (n - 1) / (k - 1) > 1 apart, so no two round to one index: none is picked twice
    return np.round(np.linspace(0, n - 1, k)).astype(np.int64)
