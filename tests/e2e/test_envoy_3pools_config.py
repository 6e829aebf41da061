"""envoy/envoy-3pools.yaml: Envoy accepts it, and its routes keep the contract with
config/router-3pools.yaml (one route per pool header value; every pool but the largest retries a
400 once on the next larger pool; the catch-all goes to the largest pool)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.envoy_runner import render_envoy_clusters, validate_envoy_config
from extproc.adapter.responses import ROUTING_METADATA_KEY, ROUTING_METADATA_NAMESPACE
from extproc.config import load_config
from tests.e2e.harness import ENVOY_3POOLS, REPO, plain_routes

pytestmark = pytest.mark.envoy


def test_envoy_3pools_validates_as_written_and_rendered(tmp_path: Path) -> None:
    res = validate_envoy_config(ENVOY_3POOLS)
    assert res.returncode == 0, res.stdout + res.stderr
    ports = {"ext_proc": 21002, "short_pool": 21003, "medium_pool": 21004, "long_pool": 21005}
    rendered = tmp_path / "e.yaml"
    rendered.write_text(
        yaml.safe_dump(render_envoy_clusters(ENVOY_3POOLS, listener=21000, admin=21001, clusters=ports))
    )
    res = validate_envoy_config(rendered)
    assert res.returncode == 0, res.stdout + res.stderr


def test_routes_match_router_pools_and_retry_upwards() -> None:
    router = load_config(REPO / "config" / "router-3pools.yaml")
    cfg: dict[str, Any] = yaml.safe_load(ENVOY_3POOLS.read_text(encoding="utf-8"))
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    (vhost,) = hcm["route_config"]["virtual_hosts"]
    assert vhost["include_attempt_count_in_response"] is True
    routes = plain_routes(vhost["routes"])
    pools = router.pools_by_size
    for pool, larger, route in zip(pools[:-1], pools[1:], routes, strict=False):
        # one message per request: the route matches the router's dynamic metadata tbr.pool
        assert "headers" not in route["match"]
        (md,) = route["match"]["dynamic_metadata"]
        assert md["filter"] == ROUTING_METADATA_NAMESPACE
        assert md["path"] == [{"key": ROUTING_METADATA_KEY}]
        assert md["value"]["string_match"]["exact"] == pool.header_value
        spec = route["route"]["inline_cluster_specifier_plugin"]["extension"]["typed_config"]
        groups = [[c["cluster_name"] for c in g["clusters"]] for g in spec["priority_groups"]]
        assert groups == [[f"{pool.name}_pool"], [f"{larger.name}_pool"]]
        retry = route["route"]["retry_policy"]
        assert retry["retriable_status_codes"] == [400] and retry["num_retries"] == 1
        assert retry["refresh_cluster_on_retry"] is True
    catch_all = routes[-1]
    assert set(catch_all["match"]) == {"prefix"}
    assert catch_all["route"]["cluster"] == f"{pools[-1].name}_pool"
    assert "retry_policy" not in catch_all["route"]
    assert len(routes) == len(pools)
