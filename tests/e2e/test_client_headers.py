"""Issue 34, item 2: a client cannot choose its pool, its retries or its timeouts, under every
documented configuration: also when an operator adds ``internal_address_config`` (common in
clusters and meshes) and the client spoofs ``X-Forwarded-For`` with an address in that range.

Real Envoy 1.40 on loopback, the real router (``tbr serve``) and the stand-in pools (devstack).
Two Envoys run on the same pools and router, both with ``internal_address_config: 10.0.0.0/8``:
the shipped ``envoy/envoy.yaml``, and the same file without its ``use_remote_address`` /
``xff_num_trusted_hops`` and client-header removals (the configuration the issue measured), which
shows the attack is real, so the first Envoy's result is not an accident of the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devstack.envoy_runner import DEFAULT_ENVOY_CONFIG
from devstack.stack import Gateway, Stack, StackOptions
from tests.service.contracts import REPO
from tests.stacks import running

pytestmark = pytest.mark.envoy

MODEL = "Qwen/Qwen3-8B"
SHORT_TEXT = "Please summarise the plot of a short story about a lighthouse keeper and a storm. " * 3
# Over every pool's max_model_len (16384 here): the router sends it to long, which answers 400.
TOO_LONG_TEXT = "The committee reviewed every clause of the agreement in detail before the vote. " * 1500
SPOOFED = {
    "x-forwarded-for": "10.1.2.3",  # inside the operator's internal range; the client is 127.0.0.1
    "x-envoy-internal": "true",
    "x-envoy-retry-on": "retriable-status-codes,5xx,reset",
    "x-envoy-retriable-status-codes": "400",
    "x-envoy-max-retries": "2",
    "x-envoy-upstream-rq-timeout-ms": "1",
    "x-tbr-pool": "long",
}
INTERNAL = {"cidr_ranges": [{"address_prefix": "10.0.0.0", "prefix_len": 8}]}
EARLY = "early_header_mutation_extensions"


def hcm_of(cfg: dict[str, Any]) -> dict[str, Any]:
    (listener,) = cfg["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    (hcm,) = chain["filters"]
    typed: dict[str, Any] = hcm["typed_config"]
    return typed


def with_internal_addresses(tmp: Path, name: str, *, shipped: bool) -> Path:
    cfg = yaml.safe_load(DEFAULT_ENVOY_CONFIG.read_text())
    hcm = hcm_of(cfg)
    hcm["internal_address_config"] = INTERNAL  # what an operator adds
    if not shipped:  # the configuration before issue 34
        hcm.pop("use_remote_address")
        hcm.pop("xff_num_trusted_hops")
        (early,) = hcm[EARLY]
        muts = early["typed_config"]["mutations"]
        early["typed_config"]["mutations"] = [m for m in muts if m["remove"] in ("x-tbr-pool", "x-tbr-calib")]
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Gateway]]:
    work = tmp_path_factory.mktemp("xff")
    options = StackOptions(
        short_max_model_len=8192,
        long_max_model_len=16384,
        envoy_config=with_internal_addresses(work, "shipped-internal", shipped=True),
        pool_args=("--time-to-first-token-s", "0.2"),
    )
    for stack in running(Stack(work, options)):
        before = stack.add_envoy(
            router_grpc=stack.ports.router_grpc,
            tag="envoy-before",
            source=with_internal_addresses(work, "before-internal", shipped=False),
        )
        yield stack.gateway, before


def post(gw: Gateway, text: str, headers: dict[str, str]) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 8}
    return httpx.post(f"{gw.base_url}/chat/completions", json=body, headers=headers, timeout=60.0)


def test_the_attack_works_without_the_settings(gateways: tuple[Gateway, Gateway]) -> None:
    """Control: the configuration the issue measured lets the spoofed client drive Envoy."""
    _, before = gateways
    r = post(before, SHORT_TEXT, SPOOFED)
    assert r.status_code == 504, r.text  # the client's 1 ms timeout
    r = post(before, TOO_LONG_TEXT, {k: v for k, v in SPOOFED.items() if "timeout" not in k})
    assert r.status_code == 400 and r.headers["x-envoy-attempt-count"] == "3"  # the client's retries


def test_spoofed_forwarded_for_cannot_change_routing_retries_or_timeouts(
    gateways: tuple[Gateway, Gateway],
) -> None:
    shipped, _ = gateways
    r = post(shipped, SHORT_TEXT, SPOOFED)
    assert r.status_code == 200, r.text  # no 1 ms timeout
    assert r.headers["x-served-by-pool"] == "short"  # the router's choice, not x-tbr-pool
    assert r.headers["x-envoy-attempt-count"] == "1"
    r = post(shipped, TOO_LONG_TEXT, SPOOFED)
    assert r.status_code == 400 and r.headers["x-served-by-pool"] == "long"
    assert r.headers["x-envoy-attempt-count"] == "1"  # the long route does not retry a 400


SHIPPED_ENVOY_CONFIGS = [
    "envoy/envoy.yaml",
    "envoy/envoy-3pools.yaml",
    "envoy/envoy-2models.yaml",
    "deploy/overlays/standalone-envoy/envoy.yaml",
    "deploy/overlays/two-models/envoy.yaml",
]


@pytest.mark.parametrize("name", SHIPPED_ENVOY_CONFIGS)
def test_every_shipped_envoy_config_sets_the_client_address_explicitly(name: str) -> None:
    """Compose mounts envoy/*.yaml unchanged; the Kubernetes overlays carry copies. (The Envoy
    Gateway and Istio overlays: tests/deploy/test_deploy.py.)"""
    cfg = yaml.safe_load((REPO / name).read_text())
    listeners = cfg["static_resources"]["listeners"]
    for listener in listeners:
        for chain in listener["filter_chains"]:
            for f in chain["filters"]:
                hcm = f["typed_config"]
                assert hcm["use_remote_address"] is True and hcm["xff_num_trusted_hops"] == 0, name
                (early,) = hcm[EARLY]
                removed = {m["remove"] for m in early["typed_config"]["mutations"]}
                assert {
                    "x-envoy-retry-on",
                    "x-envoy-max-retries",
                    "x-envoy-upstream-rq-timeout-ms",
                } <= removed
