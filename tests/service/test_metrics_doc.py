"""docs/metrics.md and the exposed metrics agree (names, types, labels), both ways."""

from __future__ import annotations

import re

from prometheus_client.metrics import MetricWrapperBase

from extproc.config import parse_config
from extproc.core.load import LoadTracker
from extproc.service.app import RouterApp
from extproc.service.load_metrics import LoadCollector
from extproc.service.metrics import RouterMetrics
from tests.service.contracts import documented
from tests.service.streams import POOLS, admin_get, calibrate


def test_every_metric_object_is_documented_with_its_type_and_labels() -> None:
    doc = documented()
    metrics = RouterMetrics()
    code = {
        w._name: (w._type, frozenset(w._labelnames))
        for group in (metrics, metrics.load)
        for w in vars(group).values()
        if isinstance(w, MetricWrapperBase)
    }
    # series a collector reads from the load tracker at scrape time
    for fam in LoadCollector(LoadTracker()).collect():
        code[fam.name] = (fam.type, frozenset(getattr(fam, "_labelnames", ())))
    assert code == doc


async def test_metrics_endpoint_exposes_every_documented_metric() -> None:
    cfg = parse_config({"pools": POOLS})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        await calibrate(app.grpc_port, "hello there " * 40, prompt_tokens=130)
        resp = await admin_get(app.admin_port, "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    exposed = {
        name: kind
        for name, kind in re.findall(r"^# TYPE (tbr_[a-z_]+) (\w+)$", resp.text, flags=re.M)
        if not name.endswith("_created")  # prometheus-client's creation-time series
    }
    want = {name + ("_total" if kind == "counter" else ""): kind for name, (kind, _) in documented().items()}
    assert exposed == want
    # Traffic produced samples with the documented labels.
    assert re.search(r'^tbr_routing_decisions_total\{category="[a-z_]+",pool="short",reason="fits"\} 1\.0$',
                     resp.text, flags=re.M)  # fmt: skip
    assert 'tbr_calibration_events_total{outcome="applied"} 1.0' in resp.text
    assert 'tbr_phase_processing_seconds_count{phase="request_body"} 1.0' in resp.text
    assert "tbr_ratio_store_up 1.0" in resp.text and "tbr_ready 1.0" in resp.text
