"""Fleet advice (issue 33, item 1): the planner's closed form on a window of decisions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from extproc.core.route.fleet_window import N_BINS, FleetWindow, bin_of
from planner.model.advice import (
    AdvicePool,
    AdviceRule,
    ThresholdAdvice,
    ThresholdCandidate,
    ThresholdHysteresis,
    advise,
    bin_mid_tokens,
    load_profile,
    mix_from_bins,
)
from planner.model.costmodel import mix_stats, size_pool_mgc
from planner.model.profiles import PROFILES
from planner.workload.trace_loaders import load_trace
from tests.shared_data import SHARED_DATA

CONV = SHARED_DATA / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
A100 = PROFILES["llama3-70b-a100"]
RULE = AdviceRule(slo_ttft_p99_s=2.0, headroom=0.1, min_instances=1, output_share=0.155)
POOLS = [AdvicePool("short", A100, 8192), AdvicePool("long", A100, 65536)]


def test_the_binned_mix_is_mix_stats_of_the_bins_midpoints() -> None:
    counts = [0] * N_BINS
    for tokens, n in ((300, 7), (1500, 40), (6000, 3), (30_000, 1)):
        counts[bin_of(tokens)] += n
    got = mix_from_bins(counts, 0.2, 512)
    assert got is not None
    mids = np.repeat([bin_mid_tokens(i) for i in range(N_BINS)], counts)
    out = np.maximum(1, np.round(0.2 * mids)).astype(np.int64)
    inp = np.maximum(1, np.round(mids - out)).astype(np.int64)
    want = mix_stats(inp, out, 512)
    for field in (
        "n",
        "mean_iters",
        "cs2_iters",
        "mean_context_tokens",
        "mean_input_tokens",
        "p99_prefill_iters",
    ):
        assert getattr(got, field) == pytest.approx(getattr(want, field), rel=1e-9), field
    assert mix_from_bins([0] * N_BINS, 0.2, 512) is None


def _window(
    rate_req_per_s: float, budgets: list[int], *, pool_of: int = 8192, seconds: float = 300.0
) -> FleetWindow:
    w = FleetWindow(["short", "long"], window_s=300.0, bucket_s=10.0, started_s=0.0)
    n = int(rate_req_per_s * seconds)
    for j in range(n):
        b = budgets[j % len(budgets)]
        w.add("short" if b <= pool_of else "long", b, j / rate_req_per_s)
    return w


def test_desired_instances_are_the_mgc_size_with_headroom_and_grow_with_the_rate() -> None:
    budgets = [400, 900, 1500, 3000, 7000, 20_000]
    last = 0
    for rate in (5.0, 20.0, 80.0):
        snap = _window(rate, budgets).snapshot(299.9)
        adv = advise(snap, POOLS, RULE)
        short = adv.pool("short")
        assert short is not None
        counts = snap.pools["short"].counts
        mix = mix_from_bins(counts, RULE.output_share, A100.chunk_tokens)
        assert mix is not None
        lam = snap.rate_req_per_s("short")
        assert lam == pytest.approx(rate * 5 / 6, rel=0.01)
        want = size_pool_mgc(lam, A100, 8192, mix, slo_ttft_p99_s=2.0).instances
        assert short.required_instances == want
        assert short.desired_instances == max(1, math.ceil(want * 1.1))
        assert short.predicted_p99_ttft_s <= 2.0 and short.slo_attainable
        assert short.desired_instances >= last
        last = short.desired_instances
    assert last > 1


def test_a_pool_without_traffic_is_advised_its_minimum() -> None:
    w = FleetWindow(["short", "long"], window_s=300.0, bucket_s=10.0, started_s=0.0)
    adv = advise(w.snapshot(100.0), POOLS, AdviceRule(slo_ttft_p99_s=2.0, min_instances=2))
    assert [p.desired_instances for p in adv.pools] == [2, 2]
    assert adv.alpha is None and adv.threshold is None and adv.saving_vs_homogeneous is None


def test_unbudgeted_requests_count_in_the_rate() -> None:
    w = FleetWindow(["short", "long"], window_s=300.0, bucket_s=10.0, started_s=0.0)
    for j in range(600):
        w.add("long", None, j * 0.5)
    long = advise(w.snapshot(299.9), POOLS, RULE).pool("long")
    assert (
        long is not None
        and long.unbudgeted == 600
        and long.arrival_rate_req_per_s == pytest.approx(2.0, rel=0.01)
    )
    assert long.required_instances >= 1


@pytest.mark.skipif(not CONV.is_file(), reason=f"{CONV} absent")
def test_live_advice_on_the_azure_conversation_trace_matches_the_planner() -> None:
    """The window fed by the real trace's routing gives the planner's α and, within the binning,
    the planner's M/G/c sizes on the exact token counts."""
    trace, _ = load_trace(CONV, "azure")
    rate = 100.0
    n = int(rate * 299)
    idx = np.arange(n) % len(trace)
    inp, out = trace.input_tokens[idx], trace.output_tokens[idx]
    budgets = (inp + out).tolist()
    w = FleetWindow(["short", "long"], window_s=300.0, bucket_s=10.0, started_s=0.0)
    for j, b in enumerate(budgets):
        w.add("short" if b <= 8192 else "long", b, j / rate)
    adv = advise(w.snapshot(299.0), POOLS, AdviceRule(slo_ttft_p99_s=2.0, output_share=0.155))
    short_mask = np.asarray(budgets) <= 8192
    assert adv.alpha == pytest.approx(float(short_mask.mean()), abs=1e-9)
    exact = size_pool_mgc(
        rate * float(short_mask.mean()),
        A100,
        8192,
        mix_stats(inp[short_mask], out[short_mask], A100.chunk_tokens),
        slo_ttft_p99_s=2.0,
    ).instances
    short = adv.pool("short")
    assert short is not None
    assert abs(short.required_instances - exact) <= max(1, round(0.15 * exact)), (
        short.required_instances,
        exact,
    )
    t = adv.threshold
    assert t is not None and t.current_threshold_tokens == 8192
    assert adv.saving_vs_homogeneous == pytest.approx(t.current_saving)
    assert t.best_saving >= t.current_saving > 0.2  # splitting pays on this mix
    cand = {c.threshold_tokens: c for c in t.candidates}
    assert set(cand) >= {1024, 2048, 4096, 8192, 16384, 32768}
    assert cand[8192].alpha == pytest.approx(float(short_mask.mean()), abs=1e-9)
    assert (
        t.best_threshold_tokens
        == min(t.candidates, key=lambda c: (c.cost_usd_per_h, c.threshold_tokens)).threshold_tokens
    )
    json.dumps(adv.as_json())


def _t(current: float, best_b: int, best: float) -> ThresholdAdvice:
    cands = (
        ThresholdCandidate(8192, 0.9, 10, 2, 1.0, current),
        ThresholdCandidate(best_b, 0.8, 8, 3, 0.9, best),
    )
    return ThresholdAdvice(8192, current, best_b, best, cands)


def test_a_change_of_b_is_advised_only_after_the_margin_holds() -> None:
    h = ThresholdHysteresis(margin=0.05, hold_s=60.0)
    assert h.update(_t(0.30, 4096, 0.33), 0.0).advised_threshold_tokens is None  # below the margin
    assert h.update(_t(0.30, 4096, 0.40), 10.0).advised_threshold_tokens is None  # margin met: pending
    assert h.update(_t(0.30, 4096, 0.40), 60.0).advised_threshold_tokens is None  # 50 s < 60 s
    assert h.update(_t(0.30, 4096, 0.34), 65.0).advised_threshold_tokens is None  # dipped: restart
    assert h.update(_t(0.30, 4096, 0.40), 70.0).advised_threshold_tokens is None
    assert h.update(_t(0.30, 4096, 0.40), 130.0).advised_threshold_tokens == 4096  # held 60 s
    assert h.update(_t(0.30, 4096, 0.33), 140.0).advised_threshold_tokens == 4096  # lead 0.03 ≥ 0.025: kept
    assert h.update(_t(0.30, 4096, 0.32), 150.0).advised_threshold_tokens is None  # lead 0.02: withdrawn
    assert h.update(None, 160.0) is None


def test_profiles_by_name_or_file(tmp_path: Path) -> None:
    assert load_profile("llama3-70b-a100") is A100
    f = tmp_path / "p.json"
    f.write_text(json.dumps({k: getattr(A100, k) for k in A100.__dataclass_fields__}))
    assert load_profile(str(f)) == A100
    y = tmp_path / "p.yaml"
    y.write_text("name: x\ntp: 1\n")
    with pytest.raises(ValueError, match="missing"):
        load_profile(str(y))
    y.write_text("name: x\nbogus: 1\n")
    with pytest.raises(ValueError, match="unknown fields bogus"):
        load_profile(str(y))
    y.write_text("- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_profile(str(y))
    with pytest.raises(ValueError, match="not one of"):
        load_profile("no-such-profile")


def test_a_pools_capacity_correction_scales_its_size_and_the_sweep_uses_it() -> None:
    budgets = [400, 900, 1500, 3000, 7000, 20_000]
    snap = _window(40.0, budgets).snapshot(299.9)
    plain = advise(snap, POOLS, RULE)
    corrected = advise(snap, [AdvicePool("short", A100, 8192, 1.75), POOLS[1]], RULE)
    p, c = plain.pool("short"), corrected.pool("short")
    assert p is not None and c is not None
    assert c.required_instances == math.ceil(p.required_instances * 1.75)
    assert corrected.pool("long") == plain.pool("long")
    t = corrected.threshold
    assert t is not None and corrected.saving_vs_homogeneous == pytest.approx(t.current_saving)
    assert t.current_saving < plain.saving_vs_homogeneous  # type: ignore[operator]
