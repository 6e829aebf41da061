"""A toy pool profile for simulator tests: fixed 10 ms iterations, no prefill or KV cost, so
service times and queueing are easy to work out by hand."""

from __future__ import annotations

from planner.model.profiles import PoolProfile


def toy_profile(**kw: float) -> PoolProfile:
    """The toy profile with any field overridden (e.g. ``max_num_seqs_cap=4``)."""
    base = dict(
        name="toy",
        model="toy",
        gpu="toy",
        tp=1,
        price_usd_per_gpu_h=1.0,
        kv_capacity_tokens=10_000_000,
        block_size_tokens=16,
        max_num_seqs_cap=8,
        w_s=0.01,
        h_s_per_kv_token=0.0,
        p_s_per_prefill_token=0.0,
        chunk_tokens=1_000_000,
    )
    base.update(kw)
    return PoolProfile(**base)  # type: ignore[arg-type]
