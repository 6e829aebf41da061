"""Shared helpers for the hardening tests: the router config they run, and the router's
Prometheus metrics (scraped text or metric deltas). Message builders are in :mod:`tests.pb`."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

CONFIG: dict[str, object] = {
    "pools": [
        {"name": "short", "max_model_len": 8192, "header_value": "short"},
        {"name": "long", "max_model_len": 65536, "header_value": "long"},
    ],
    "calibration": {"warmup_samples": 2},
}


async def metrics_text(admin_port: int) -> str:
    async with httpx.AsyncClient() as c:
        r = await c.get(f"http://127.0.0.1:{admin_port}/metrics")
        r.raise_for_status()
        return r.text


def sample(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Value of one Prometheus sample (0.0 when absent)."""
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and (labels is None or all(s.labels.get(k) == v for k, v in labels.items())):
                return float(s.value)
    return 0.0


class Counts:
    """Metric deltas on a shared router: ``c = Counts(app)`` then ``c.delta(name, labels)``.

    Reads the router's own Prometheus registry (the same one ``/metrics`` serves).
    """

    def __init__(self, app: object) -> None:
        self._registry = app.metrics.registry  # type: ignore[attr-defined]
        self._before = self._snapshot()

    def _snapshot(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = {}
        for fam in self._registry.collect():
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
        return out

    def delta(self, name: str, labels: dict[str, str] | None = None) -> float:
        """Sum over samples of ``name`` matching ``labels`` (a subset) of now − before."""
        now = self._snapshot()
        total = 0.0
        for (n, lab), v in now.items():
            if n != name:
                continue
            d = dict(lab)
            if labels is not None and any(d.get(k) != v2 for k, v2 in labels.items()):
                continue
            total += v - self._before.get((n, lab), 0.0)
        return total

    def now(self, name: str, labels: dict[str, str] | None = None) -> float:
        total = 0.0
        for (n, lab), v in self._snapshot().items():
            if n == name and (labels is None or all(dict(lab).get(k) == v2 for k, v2 in labels.items())):
                total += v
        return total
