"""The output learner's tail-quantile walk (extproc.core.estimate.output_reserve._tail_quantile_bin) gives the
bin of the plain top-down walk over every bin, on its fast paths (counts only; prior only) too."""

from __future__ import annotations

import random

from extproc.core.estimate import output_reserve as o


def _every_bin(
    pmf: list[float], counts: dict[int, float], count_total: float, pmf_weight: float, tail_share: float
) -> int:
    allowed = tail_share * (pmf_weight + count_total)
    above = 0.0
    for b in range(o.N_BINS - 1, -1, -1):
        above += (pmf_weight * pmf[b] if pmf else 0.0) + counts.get(b, 0.0)
        if above > allowed:
            return b
    return 0


def test_same_bin_as_walking_every_bin() -> None:
    rng = random.Random(1)
    for _ in range(5000):
        pmf = [rng.random() ** 3 for _ in range(o.N_BINS)] if rng.random() < 0.5 else []
        total = sum(pmf) or 1.0
        pmf = [x / total for x in pmf]
        n = rng.randrange(0, 12) if not pmf or rng.random() < 0.5 else 0
        counts = {rng.randrange(o.N_BINS): rng.random() * 5 for _ in range(n)}
        weight = rng.choice([0.0, 1.0, rng.random() * 3])
        eps = rng.choice([0.01, 0.05, 0.2, rng.random()])
        args = (pmf, counts, sum(counts.values()), weight, eps)
        assert o._tail_quantile_bin(*args) == _every_bin(*args)
