"""Envoy bootstraps for the benchmarks: the repository's ``envoy/envoy.yaml`` itself, with the few
fields a benchmark needs changed (nothing of it is restated here).

* :func:`front_bootstrap`: ``envoy/envoy.yaml`` with its one listener cloned per variant (named
  after it, on its own port, HCM ``stat_prefix`` = the variant name). A variant either drops the
  ext_proc filter (the bare-Envoy baseline) or keeps the file's filter pointed at its own ext_proc
  cluster (a clone of the file's ``ext_proc`` cluster over the variant's router processes), with
  the file's one-message design or the two-message design (:func:`two_messages`, with
  ``allow_mode_override`` as the variant asks), and ``processing_mode`` fields as the variant asks. ``short_pool`` and
  ``long_pool`` point at the stand-in upstream. Routes, retries, timeouts, buffer limits and
  circuit breakers are the file's.
* :func:`upstream_bootstrap`: the fast fixed upstream (:mod:`devstack.fixed_upstream`), an Envoy
  answering every request with a ``direct_response`` OpenAI-style JSON body carrying
  ``usage.prompt_tokens``, picked by the ``x-bench-body`` request header.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.envoy_runner import (
    CLUSTER_EXT_PROC,
    CLUSTER_LONG,
    CLUSTER_SHORT,
    DEFAULT_ENVOY_CONFIG,
    load_envoy_config,
    set_static_endpoints,
)
from devstack.fixed_upstream import fixed_upstream_config
from devstack.procs import LOOPBACK
from extproc.adapter.off_path import CALIB_HEADER, CALIB_METADATA_KEY
from extproc.adapter.responses import ROUTING_METADATA_NAMESPACE

__all__ = [
    "BODY_HEADER",
    "ListenerSpec",
    "front_bootstrap",
    "is_one_message",
    "one_message",
    "two_messages",
    "upstream_bootstrap",
]

BODY_HEADER = "x-bench-body"
ROUTING_HEADER = "x-tbr-pool"
_EXT_PROC_FILTER = "envoy.filters.http.ext_proc"


@dataclass
class ListenerSpec:
    """One front listener.

    Attributes:
        name: variant name (also the HCM stat prefix and the ext_proc cluster suffix).
        port: listener port.
        ext_proc_ports: router ports of its ext_proc cluster; empty = no ext_proc filter.
        allow_mode_override: as in envoy/envoy.yaml (True); False shows the cost of the
            response-headers message that the override turns off.
        processing_mode: overrides of the filter's processing_mode fields.
        one_message: the one-message design (docs/design/004-one-message.md): request headers
            SKIP, ``request_attributes`` for the request line, the decision in dynamic metadata
            (namespace ``tbr``) with an ``envoy.filters.http.buffer`` filter after ext_proc, and
            the short route matching that metadata instead of the routing header.
    """

    name: str
    port: int
    ext_proc_ports: list[int] = field(default_factory=list)
    allow_mode_override: bool = True
    processing_mode: dict[str, str] = field(default_factory=dict)
    one_message: bool = False


_BUFFER = "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer"
ONE_MESSAGE_ATTRIBUTES = ["request.path", "request.method", "request.id"]


def is_one_message(ext_proc: dict[str, Any]) -> bool:
    """Whether the routing filter ``ext_proc`` (an entry of ``http_filters``) is in the one-message
    design: request headers SKIPped (envoy/envoy.yaml since issue 15)."""
    mode: dict[str, str] = ext_proc["typed_config"].get("processing_mode", {})
    return mode.get("request_header_mode") == "SKIP"


def one_message(hcm: dict[str, Any], ext_proc: dict[str, Any], buffer_limit_bytes: int) -> None:
    """Turn the listener's HCM (edited in place) from the two-message design into the one-message
    design (docs/design/004-one-message.md); ``ext_proc``: its routing filter (an entry of its
    ``http_filters``). The off-path calibration filter, when present, is selected by the routing
    answer's dynamic metadata ``tbr.calib`` instead of the ``x-tbr-calib`` header, and forwards the
    ``tbr`` namespace to the router. A no-op on a one-message HCM."""
    if is_one_message(ext_proc):
        return
    typed = ext_proc["typed_config"]
    typed["processing_mode"].update(request_header_mode="SKIP", response_header_mode="SKIP")
    typed["request_attributes"] = ONE_MESSAGE_ATTRIBUTES
    typed["metadata_options"] = {"receiving_namespaces": {"untyped": ["tbr"]}}
    # Holds the request headers until the body is complete, so the route is picked after the
    # ext_proc body answer set the metadata (and raises the stream's buffer limit to this).
    filters = hcm["http_filters"]
    buffer = {
        "name": "envoy.filters.http.buffer",
        "typed_config": {"@type": _BUFFER, "max_request_bytes": buffer_limit_bytes},
    }
    filters.insert(filters.index(ext_proc) + 1, buffer)
    for f in filters:
        if f["name"] == CALIBRATION_FILTER:
            (matcher,) = f["typed_config"]["xds_matcher"]["matcher_list"]["matchers"]
            matcher["predicate"] = {"single_predicate": _CALIB_METADATA_PREDICATE}
            inner = _calibration_ext_proc(f)
            inner["metadata_options"] = {"forwarding_namespaces": {"untyped": [ROUTING_METADATA_NAMESPACE]}}
    for vhost in hcm["route_config"]["virtual_hosts"]:
        for route in vhost["routes"]:
            match = route["match"]
            if any(h.get("name") == ROUTING_HEADER for h in match.get("headers", [])):
                del match["headers"]
                match["dynamic_metadata"] = [
                    {
                        "filter": "tbr",
                        "path": [{"key": "pool"}],
                        "value": {"string_match": {"exact": "short"}},
                    }
                ]


def two_messages(hcm: dict[str, Any], ext_proc: dict[str, Any]) -> None:
    """The inverse of :func:`one_message`: the design before issue 15 (request headers SEND, body
    BUFFERED, response headers SEND with ``allow_mode_override``, the decision in the routing
    header, routes matching it, the calibration filter selected by ``x-tbr-calib``), which Envoy
    Gateway and Istio still run. Edits ``hcm`` in place; a no-op on a two-message HCM."""
    if not is_one_message(ext_proc):
        return
    typed = ext_proc["typed_config"]
    typed["processing_mode"].update(request_header_mode="SEND", response_header_mode="SEND")
    typed["allow_mode_override"] = True
    typed.pop("request_attributes", None)
    typed.pop("metadata_options", None)
    filters = hcm["http_filters"]
    filters[:] = [f for f in filters if f["name"] != "envoy.filters.http.buffer"]
    for f in filters:
        if f["name"] == CALIBRATION_FILTER:
            (matcher,) = f["typed_config"]["xds_matcher"]["matcher_list"]["matchers"]
            matcher["predicate"] = {"single_predicate": _CALIB_HEADER_PREDICATE}
            _calibration_ext_proc(f).pop("metadata_options", None)
    for vhost in hcm["route_config"]["virtual_hosts"]:
        for route in vhost["routes"]:
            match = route["match"]
            pool = [
                m["value"]["string_match"]["exact"]
                for m in match.get("dynamic_metadata", [])
                if m.get("filter") == ROUTING_METADATA_NAMESPACE
            ]
            if pool:
                del match["dynamic_metadata"]
                match["headers"] = [{"name": ROUTING_HEADER, "string_match": {"exact": pool[0]}}]


_CALIB_HEADER_PREDICATE: dict[str, Any] = {
    "input": {
        "name": "calib_header",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput",
            "header_name": CALIB_HEADER,
        },
    },
    "value_match": {"safe_regex": {"google_re2": {}, "regex": ".+"}},
}

_CALIB_METADATA_PREDICATE: dict[str, Any] = {
    # A string value_match on this input validates but never matches (the input yields a Metadata
    # value): the metadata matcher with present_match is the one that works (design 004).
    "input": {
        "name": "envoy.matching.inputs.dynamic_metadata",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.DynamicMetadataInput",
            "filter": ROUTING_METADATA_NAMESPACE,
            "path": [{"key": CALIB_METADATA_KEY}],
        },
    },
    "custom_match": {
        "name": "envoy.matching.matchers.metadata_matcher",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.matching.input_matchers.metadata.v3.Metadata",
            "value": {"present_match": True},
        },
    },
}

CALIBRATION_FILTER = "tbr_calibration"
"""envoy/envoy.yaml's composite filter running the off-path calibration ext_proc (observability mode)."""


def _calibration_ext_proc(composite: dict[str, Any]) -> dict[str, Any]:
    """The ``ExternalProcessor`` config inside the calibration filter's matcher action."""
    (matcher,) = composite["typed_config"]["xds_matcher"]["matcher_list"]["matchers"]
    inner: dict[str, Any] = matcher["on_match"]["action"]["typed_config"]["typed_config"]["typed_config"]
    return inner


def _variant_listener(template: dict[str, Any], spec: ListenerSpec) -> dict[str, Any]:
    listener = copy.deepcopy(template)
    listener["name"] = spec.name
    listener["address"] = {"socket_address": {"address": LOOPBACK, "port_value": spec.port}}
    (chain,) = listener["filter_chains"]
    (hcm_filter,) = chain["filters"]
    hcm = hcm_filter["typed_config"]
    hcm["stat_prefix"] = spec.name
    filters = hcm["http_filters"]
    (ext_proc,) = [f for f in filters if f["name"] == _EXT_PROC_FILTER]
    calibration = [f for f in filters if f["name"] == CALIBRATION_FILTER]
    if not spec.ext_proc_ports:
        filters.remove(ext_proc)
        for f in calibration:
            filters.remove(f)
        return listener
    typed = ext_proc["typed_config"]
    typed["grpc_service"]["envoy_grpc"]["cluster_name"] = f"{CLUSTER_EXT_PROC}_{spec.name}"
    for f in calibration:  # the off-path calibration filter talks to the same router processes
        _calibration_ext_proc(f)["grpc_service"]["envoy_grpc"]["cluster_name"] = (
            f"{CLUSTER_EXT_PROC}_{spec.name}"
        )
    if spec.one_message:
        one_message(hcm, ext_proc, listener["per_connection_buffer_limit_bytes"])
    else:
        two_messages(hcm, ext_proc)
        typed["allow_mode_override"] = spec.allow_mode_override
    typed["processing_mode"].update(spec.processing_mode)
    return listener


def front_bootstrap(
    admin_port: int,
    listeners: list[ListenerSpec],
    short_ports: list[int],
    long_ports: list[int],
    source: Path = DEFAULT_ENVOY_CONFIG,
) -> dict[str, Any]:
    """The front Envoy: ``source`` (``envoy/envoy.yaml``) with one listener per variant, one
    ext_proc cluster per filtered variant and the pool clusters on the given loopback ports.

    Raises:
        ValueError: ``source`` does not have exactly one listener, or lacks a cluster named
            ``ext_proc``, ``short_pool`` or ``long_pool``.
    """
    cfg = load_envoy_config(source)
    cfg["admin"]["address"] = {"socket_address": {"address": LOOPBACK, "port_value": admin_port}}
    resources = cfg["static_resources"]
    if len(resources["listeners"]) != 1:
        raise ValueError(f"{source}: expected one listener, found {len(resources['listeners'])}")
    template = resources["listeners"][0]
    resources["listeners"] = [_variant_listener(template, spec) for spec in listeners]
    clusters = {c["name"]: c for c in resources["clusters"]}
    missing = {CLUSTER_EXT_PROC, CLUSTER_SHORT, CLUSTER_LONG} - set(clusters)
    if missing:
        raise ValueError(f"{source}: clusters missing: {', '.join(sorted(missing))}")
    ext_proc_template = clusters.pop(CLUSTER_EXT_PROC)
    set_static_endpoints(clusters[CLUSTER_SHORT], short_ports)
    set_static_endpoints(clusters[CLUSTER_LONG], long_ports)
    for spec in listeners:
        if spec.ext_proc_ports:
            cluster = copy.deepcopy(ext_proc_template)
            cluster["name"] = f"{CLUSTER_EXT_PROC}_{spec.name}"
            set_static_endpoints(cluster, spec.ext_proc_ports)
            clusters[cluster["name"]] = cluster
    resources["clusters"] = list(clusters.values())
    return cfg


def upstream_bootstrap(admin_port: int, port: int, bodies: dict[str, str]) -> dict[str, Any]:
    """The fixed upstream on ``port``: ``200 application/json`` with ``bodies[label]`` for a
    request carrying ``x-bench-body: label`` (so each benchmark body gets its own true ``usage``)."""
    return fixed_upstream_config(admin_port, {"upstream": port}, bodies, select_header=BODY_HEADER)
