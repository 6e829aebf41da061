"""docs/metrics.md and the exposed metrics agree (names, types, labels), both ways."""

from __future__ import annotations

import re

from prometheus_client.metrics import MetricWrapperBase

from extproc.config import parse_config
from extproc.core.route.load import LoadTracker
from extproc.service.app import RouterApp
from extproc.service.fleet_advice import AdviceCollector, FleetAdvisor
from extproc.service.load_metrics import LoadCollector
from extproc.service.metrics import RouterMetrics
from extproc.service.output_metrics import OutputCollector
from extproc.service.request_metrics import CountedCounter, CountedHistogram
from tests.service.contracts import documented
from tests.service.streams import POOLS, admin_get, calibrate


def test_every_metric_object_is_documented_with_its_type_and_labels() -> None:
    doc = documented()
    metrics = RouterMetrics()
    code = {
        w._name: (w._type, frozenset(w._labelnames))
        for group in (metrics, metrics.load, metrics.pool_check, metrics.pool_health)
        for w in vars(group).values()
        if isinstance(w, MetricWrapperBase)
    }
    # per-request series counted in plain cells, exposed by their own collector
    for w in vars(metrics).values():
        if isinstance(w, CountedCounter | CountedHistogram):
            for fam in w.describe():
                code[fam.name] = (fam.type, frozenset(w.labelnames))
    # series a collector reads from the load tracker at scrape time
    for fam in LoadCollector(LoadTracker()).collect():
        code[fam.name] = (fam.type, frozenset(getattr(fam, "_labelnames", ())))
    # and from the output learner (issue 30)
    for fam in OutputCollector(lambda: None).collect():
        code[fam.name] = (fam.type, frozenset(getattr(fam, "_labelnames", ())))
    # and the fleet advice (issue 33), with traffic in both pools
    now = [0.0]
    advisor = FleetAdvisor(parse_config({"pools": POOLS, "advice": {"enabled": True}}), clock=lambda: now[0])
    advisor.decision("short", 1000)
    advisor.decision("long", 20_000)
    now[0] = 10.0
    for fam in AdviceCollector(lambda: advisor).collect():
        code[fam.name] = (fam.type, frozenset(getattr(fam, "_labelnames", ())))
    code["tbr_fleet_window_sync_rows"] = ("counter", frozenset({"outcome"}))  # registered by the app
    assert code == doc


async def test_metrics_endpoint_exposes_every_documented_metric() -> None:
    cfg = parse_config({"pools": POOLS, "advice": {"enabled": True}})  # advice series too (issue 33)
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        await calibrate(app.grpc_port, "hello there " * 40, prompt_tokens=130)
        resp = await admin_get(app.admin_port, "/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    exposed = dict(re.findall(r"^# TYPE (tbr_[a-z_]+) (\w+)$", resp.text, flags=re.M))
    want = {name + ("_total" if kind == "counter" else ""): kind for name, (kind, _) in documented().items()}
    assert exposed == want
    # Traffic produced samples with the documented labels.
    assert re.search(r'^tbr_routing_decisions_total\{category="[a-z_]+",pool="short",reason="fits"\} 1\.0$',
                     resp.text, flags=re.M)  # fmt: skip
    assert 'tbr_calibration_events_total{outcome="applied"} 1.0' in resp.text
    assert 'tbr_phase_processing_seconds_count{phase="request_body"} 1.0' in resp.text
    assert "tbr_ratio_store_up 1.0" in resp.text and "tbr_ready 1.0" in resp.text


def test_platform_telemetry_and_no_created_series() -> None:
    """Process and Python collectors, tbr_build_info of the installed build, no `_created` series,
    fraction gauges named `_ratio`, the model label named as vLLM names it (issue 16, item 5)."""
    import platform

    from prometheus_client import generate_latest

    from extproc.core.text.runs import RUNSCAN, RUNSCAN_PASS
    from extproc.service.metrics import RouterMetrics, build_version

    text = generate_latest(RouterMetrics().registry).decode()
    for family in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info", "python_gc_"):
        assert family in text, family
    assert (
        f'tbr_build_info{{python_version="{platform.python_version()}",revision="unknown",'
        f'run_counter="{RUNSCAN}",run_counter_pass="{RUNSCAN_PASS}",version="{build_version()}"}} 1.0' in text
    )
    assert build_version() != "unknown"
    assert "_created" not in text
    doc = documented()
    fraction_gauges = [n for n, (kind, _) in doc.items() if kind == "gauge" and "usage" in n]
    assert fraction_gauges and all(n.endswith("_ratio") for n in fraction_gauges)
    assert all("model" not in labels for _, labels in doc.values())
