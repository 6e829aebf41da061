"""The closed loop of issue 33, item 3: daily and burst workloads, HPA rules, the DES under an
autoscaler, and the comparison of static, queue-length and advice-driven scaling."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from planner.des import PoolSpec, simulate
from planner.des.autoscale import AutoscalerSpec, PoolObservation, Stabilizer, recommend
from planner.des.autoscale_experiment import Experiment, run_experiment
from planner.des.closed_loop import LoopPool, run_closed_loop
from planner.des.routers import make_router
from planner.model.advice import AdviceRule
from planner.model.profiles import PROFILES
from planner.workload.daily_trace import AZURE_2024_CONV_WEEKDAY_PROFILE, burst_rate, daily_rate, time_scaled
from planner.workload.trace_loaders import load_trace
from tests.shared_data import SHARED_DATA

CONV = SHARED_DATA / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
A100 = PROFILES["llama3-70b-a100"]
needs_conv = pytest.mark.skipif(not CONV.is_file(), reason=f"{CONV} absent")


def test_the_daily_rate_follows_the_published_profile() -> None:
    t, r = daily_rate(20.0)
    for hour, share in enumerate(AZURE_2024_CONV_WEEKDAY_PROFILE):
        mid = int((hour + 0.5) * 60)  # knots every minute: the hour's midpoint
        assert t[mid] == (hour + 0.5) * 3600 and r[mid] == pytest.approx(20.0 * share)
    assert max(AZURE_2024_CONV_WEEKDAY_PROFILE) == 1.0
    assert max(AZURE_2024_CONV_WEEKDAY_PROFILE) / min(AZURE_2024_CONV_WEEKDAY_PROFILE) == pytest.approx(
        1.93, abs=0.01
    )
    with pytest.raises(ValueError):
        daily_rate(0.0)


@needs_conv
def test_time_scaling_keeps_the_mix_and_follows_the_rate() -> None:
    base, _ = load_trace(CONV, "azure")
    rate = daily_rate(20.0, start_hour=6.0, duration_s=4 * 3600.0)
    a = time_scaled(base, rate)
    assert time_scaled(base, rate).arrival_s.tobytes() == a.arrival_s.tobytes()  # deterministic
    expected = np.trapezoid(rate[1], rate[0])
    assert len(a) == pytest.approx(expected, rel=0.01)  # the base trace's own bursts move the end a little
    assert np.all(np.diff(a.arrival_s) >= 0)
    hourly = np.histogram(a.arrival_s, bins=4, range=(0, 4 * 3600))[0] / 3600.0
    for h in range(4):
        sel = (rate[0] >= h * 3600) & (rate[0] <= (h + 1) * 3600)
        assert hourly[h] == pytest.approx(float(rate[1][sel].mean()), rel=0.05)
    n = len(base)
    assert a.input_tokens[:n].tolist() == base.input_tokens.tolist()  # the mix, in its order
    _t, r = burst_rate(10.0, 2.5, burst_start_s=600.0, burst_s=300.0, duration_s=1800.0)
    assert r.max() == 25.0 and r[0] == r[-1] == 10.0


def _obs(current: int, waiting: float = 0.0, kv: float = 0.0, advice: int | None = None) -> PoolObservation:
    return PoolObservation(current=current, ready=current, waiting=waiting, kv_usage=kv, advice=advice)


def test_hpa_rules_of_each_policy() -> None:
    q = AutoscalerSpec("queue", queue_target=4.0)
    assert recommend(q, _obs(5, waiting=40.0), 0) == 10  # ceil(40 / 4)
    assert recommend(q, _obs(5, waiting=21.0), 0) == 5  # within the 10 % tolerance
    assert recommend(q, _obs(5, waiting=0.0), 0) == 0
    kv = AutoscalerSpec("kv", kv_target=0.5)
    assert recommend(kv, _obs(4, kv=0.75), 0) == 6
    assert recommend(AutoscalerSpec("advice"), _obs(4, advice=9), 0) == 9
    assert recommend(AutoscalerSpec("advice"), _obs(4), 0) == 4  # no advice: keep
    assert recommend(AutoscalerSpec("static"), _obs(4), 7) == 7
    s = Stabilizer(window_s=600.0, lo=1, hi=8)
    assert s.apply(5, 0.0) == 5
    assert s.apply(12, 30.0) == 8  # up at once, clamped
    assert s.apply(2, 60.0) == 8  # down only after the window
    assert s.apply(2, 631.0) == 2
    with pytest.raises(ValueError, match="unknown autoscaling policy"):
        AutoscalerSpec("cpu")


@needs_conv
def test_a_static_closed_loop_is_the_des() -> None:
    """With nothing to scale, the closed loop serves every request exactly as planner.des does."""
    base, _ = load_trace(CONV, "azure")
    trace = time_scaled(base, daily_rate(12.0, start_hour=10.0, duration_s=900.0))
    pools = [LoopPool("short", A100, 8192, 3, 3), LoopPool("long", A100, 65536, 1, 1)]
    res = run_closed_loop(trace, pools, AutoscalerSpec("static"), advice_rule=AdviceRule(slo_ttft_p99_s=2.0))
    ref = simulate(trace, [PoolSpec("short", A100, 8192, 3), PoolSpec("long", A100, 65536, 1)],
                   make_router("shortest-fit", [8192, 65536]), warmup_fraction=0.0)  # fmt: skip
    assert res.ttft_s.tobytes() == ref.ttft_s.tobytes()
    assert res.scale_events == {"short": 0, "long": 0}
    assert res.gpu_hours["short"] == pytest.approx(3 * 8 * res.end_s / 3600)


@needs_conv
def test_advice_scales_a_pool_up_after_the_cold_start_and_gpu_hours_follow_the_instances() -> None:
    base, _ = load_trace(CONV, "azure")
    trace = time_scaled(base, burst_rate(4.0, 4.0, burst_start_s=900.0, burst_s=1200.0, duration_s=3000.0))
    pools = [LoopPool("short", A100, 8192, 4, 4, 1.75), LoopPool("long", A100, 65536, 1, 1)]
    spec = AutoscalerSpec("advice", cold_start_s=120.0, interval_s=30.0, scale_down_window_s=300.0)
    res = run_closed_loop(trace, pools, spec, advice_rule=AdviceRule(slo_ttft_p99_s=2.0, headroom=0.1))
    tl = res.timeline["short"]
    base_n = max(c for t, c, _ in tl if t < 840.0)
    up = next(t for t, c, _ in tl if c > base_n)
    assert 840.0 <= up <= 1200.0  # the burst's ramp starts at 840 s; the advice follows within its window
    ready_at = next(t for t, _, r in tl if r > base_n)
    assert ready_at >= up + 120.0 - 30.0  # served only after the cold start (seen at the next decision)
    assert max(c for _, c, _ in tl) >= 2 * base_n and tl[-1][1] < max(c for _, c, _ in tl)  # and back down
    assert res.scale_events["short"] >= 2
    # GPU-hours: every started instance counts from its start to its stop; no fewer than the
    # instances the timeline shows at each decision over the run (they only differ by draining).
    lower = sum((t1 - t0) * c for (t0, c, _), (t1, _, _) in itertools.pairwise(tl)) * 8 / 3600
    assert res.gpu_hours["short"] >= lower * 0.99


@needs_conv
def test_closed_loop_on_a_slice_of_the_day_advice_holds_the_slo_with_fewer_gpu_hours_than_queue_scaling() -> (
    None
):
    """A fast slice: the morning ramp, 06:00-07:30 UTC at a 20 req/s peak."""
    base, _ = load_trace(CONV, "azure")
    workload = time_scaled(base, daily_rate(20.0, start_hour=6.0, duration_s=5400.0))
    res = run_experiment(
        Experiment(workload=workload, base=base, profile=A100, policies=("static", "queue", "advice"))
    )
    s = res.summaries
    assert res.corrections["short"]["ratio"] > 1.0  # the closed form is optimistic on this mix
    assert s["static"]["slo_windows_met"] >= 0.99 and s["static"]["scale_events"] == {"short": 0, "long": 0}
    assert s["advice"]["slo_windows_met"] >= 0.99
    assert s["advice"]["gpu_hours"] < s["queue"]["gpu_hours"]
    assert s["advice"]["gpu_hours"] <= s["static"]["gpu_hours"]
    assert s["advice"]["rejected"] == 0


@pytest.mark.slow
@needs_conv
def test_the_full_day_and_the_burst() -> None:
    """docs/results.md's table: a day at a 20 req/s peak and a 2.5x burst, every policy."""
    base, _ = load_trace(CONV, "azure")
    for rate in (
        daily_rate(20.0),
        burst_rate(10.0, 2.5, burst_start_s=3600.0, burst_s=900.0, duration_s=7200.0),
    ):
        res = run_experiment(Experiment(workload=time_scaled(base, rate), base=base, profile=A100))
        s = res.summaries
        assert s["advice"]["slo_windows_met"] >= 0.99
        assert s["advice"]["gpu_hours"] < s["queue"]["gpu_hours"]
        assert math.isfinite(s["advice"]["gpu_hours"])
