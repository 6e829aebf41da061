"""The advice's ``capacity_correction``: how far the closed form's pool size is from the DES's.

:func:`planner.model.costmodel.size_pool_mgc` is fast enough to run at every scrape, but where prefill
dominates the iteration time it is optimistic: on the Azure 2023 conversation mix with the
``llama3-70b-a100`` profile it gives 2 short instances at 10 req/s and 4 at 20 req/s, where the
steady-state DES (:func:`planner.des.sizing.size_pool_des`, the planner's verified sizing) needs 4 and
7. :func:`capacity_correction` measures that ratio on a sample of the pool's own traffic at a
reference rate (the peak the pool must hold); the operator sets it as ``advice.capacity_correction``
and the simulator's closed loop uses it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.des.sizing import Slo, size_pool_des
from planner.model.costmodel import mix_stats, size_pool_mgc
from planner.model.profiles import PoolProfile
from planner.workload.trace import Trace

__all__ = ["Correction", "capacity_correction"]


@dataclass(frozen=True)
class Correction:
    """``des_instances / mgc_instances`` at ``rate_req_per_s`` (≥ 1.0 when the closed form is optimistic)."""

    ratio: float
    des_instances: int
    mgc_instances: int
    rate_req_per_s: float


def capacity_correction(
    sample: Trace, profile: PoolProfile, max_model_len: int, slo: Slo, rate_req_per_s: float, *, seed: int = 0
) -> Correction:
    """Size ``sample`` (one pool's requests), time-scaled to ``rate_req_per_s``, by M/G/c and by the
    DES; their ratio, never below 1.0. Raises ``ValueError`` for an empty sample or a non-positive rate."""
    if len(sample) < 2 or rate_req_per_s <= 0:
        raise ValueError("capacity_correction needs at least two requests and a positive rate")
    scaled = replace(sample, arrival_s=sample.arrival_s * (sample.rate_req_per_s / rate_req_per_s))
    mix = mix_stats(sample.input_tokens, sample.output_tokens, profile.chunk_tokens)
    mgc = max(
        1, size_pool_mgc(rate_req_per_s, profile, max_model_len, mix, slo_ttft_p99_s=slo.ttft_p99_s).instances
    )
    des, _ = size_pool_des(scaled, profile, max_model_len, slo, start_instances=mgc, seed=seed)
    return Correction(max(1.0, des / mgc), des, mgc, rate_req_per_s)
