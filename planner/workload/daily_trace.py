"""Workloads with a daily shape and with a burst, built from a trace at hand by time-scaling.

The request mix (input and output tokens, in their order) is the base trace's, tiled as often as
needed; only the arrival times change. A base trace of mean rate ``r0`` puts request ``i`` at
``a_i``, i.e. at expected position ``a_i·r0`` in its request count; the new trace puts it where the
target rate's cumulative count ``Λ(t) = ∫₀ᵗ λ(s) ds`` reaches that position, ``t_i = Λ⁻¹(a_i·r0·k)``
with ``k`` the ratio of target to base requests. The base trace's burstiness (its inter-arrival
pattern, relative to its mean) is thus kept, stretched to the target rate.

:data:`AZURE_2024_CONV_WEEKDAY_PROFILE` is the daily load profile: the mean over the five weekdays
(13–17 May 2024, UTC) of the hourly invocation rate of the Azure LLM inference trace 2024,
conversation service, normalised to its peak (14:00 UTC). Source: Azure/AzurePublicDataset,
``analysis/AzureLLMInferenceDataset2024.ipynb`` (commit 7b8259a1873d698c2b42f69ec80e4c905b772242),
figure "Conversation" of invocations per minute over the week, digitised (the line's mean height per
pixel column, ≈ 8 columns per hour, averaged per hour); the trace is described in Stojkovic et al.,
"DynamoLLM: Designing LLM Inference Clusters for Performance and Energy Efficiency" (arXiv
2408.00741). Peak / trough = 1.93 (14:00 against 22:00 UTC).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from planner.workload.trace import Trace, base_period_s, tile_periods

__all__ = ["AZURE_2024_CONV_WEEKDAY_PROFILE", "burst_rate", "daily_rate", "time_scaled"]

AZURE_2024_CONV_WEEKDAY_PROFILE: tuple[float, ...] = (
    0.666, 0.727, 0.714, 0.591, 0.600, 0.653, 0.753, 0.812, 0.830, 0.808, 0.728, 0.769,
    0.862, 0.954, 1.000, 0.931, 0.847, 0.812, 0.807, 0.758, 0.689, 0.576, 0.518, 0.540,
)  # fmt: skip
"""Hourly load, hours 0..23 UTC, relative to the peak hour (module docstring for the source)."""

Rate = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]
"""A piecewise-linear arrival rate: knot times (s, increasing) and rates there (req/s)."""


def daily_rate(
    peak_req_per_s: float,
    profile: Sequence[float] = AZURE_2024_CONV_WEEKDAY_PROFILE,
    *,
    start_hour: float = 0.0,
    duration_s: float = 86_400.0,
) -> Rate:
    """Rate ``peak × profile`` with each hour's value at its midpoint, linear in between (cyclic),
    from ``start_hour`` (UTC) for ``duration_s`` seconds. Raises ``ValueError`` for an empty profile,
    a negative value or a non-positive peak or duration."""
    if not profile or min(profile) < 0 or peak_req_per_s <= 0 or duration_s <= 0:
        raise ValueError("daily_rate needs a non-empty, non-negative profile and positive peak and duration")
    n = len(profile)
    hour_s = 86_400.0 / n
    t = np.arange(0.0, duration_s + 60.0, 60.0)
    pos = ((t / hour_s + start_hour * n / 24.0) - 0.5) % n
    lo = np.floor(pos).astype(int)
    frac = pos - lo
    prof = np.asarray(profile, dtype=np.float64)
    rate = peak_req_per_s * (prof[lo] * (1 - frac) + prof[(lo + 1) % n] * frac)
    return t.astype(np.float64), np.asarray(rate, dtype=np.float64)


def burst_rate(
    base_req_per_s: float, burst_factor: float, *, burst_start_s: float, burst_s: float, duration_s: float,
    ramp_s: float = 60.0,
) -> Rate:  # fmt: skip
    """``base`` req/s, rising linearly over ``ramp_s`` to ``base × burst_factor`` at ``burst_start_s``,
    held for ``burst_s``, back down over ``ramp_s``. Raises ``ValueError`` on non-positive inputs."""
    if min(base_req_per_s, burst_factor, burst_s, duration_s, ramp_s) <= 0:
        raise ValueError("burst_rate needs positive rates and durations")
    b0, b1 = burst_start_s, burst_start_s + burst_s
    t = np.array([0.0, b0 - ramp_s, b0, b1, b1 + ramp_s, duration_s])
    r = np.array([1.0, 1.0, burst_factor, burst_factor, 1.0, 1.0]) * base_req_per_s
    return t, r


def time_scaled(base: Trace, rate: Rate) -> Trace:
    """``base`` tiled and re-timed to follow ``rate`` (module docstring): as many requests as the
    rate's integral, deterministic (no random draw). Raises ``ValueError`` for a base trace of fewer
    than two requests."""
    if len(base) < 2:
        raise ValueError("time_scaled needs a base trace of at least two requests")
    t, r = rate
    cum = np.concatenate([[0.0], np.cumsum((r[1:] + r[:-1]) / 2.0 * np.diff(t))])
    total = int(cum[-1])
    period = base_period_s(base)
    copies = -(-total // len(base)) + 1
    tiled = tile_periods(base, period, copies)
    r0 = len(base) / period
    position = tiled.arrival_s * r0  # expected request count at each base arrival
    keep = position < cum[-1]
    new_t = np.interp(position[keep], cum, t)
    sub = tiled.subset(keep)
    return replace(sub, arrival_s=new_t - new_t[0], origin_s=None)
