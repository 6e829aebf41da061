"""Every configuration ``make bench`` measures side by side (:func:`variants`), and the body sizes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from benchmarks.stack import Variant

__all__ = ["ALL", "DIAGNOSTIC", "SIZES", "variants"]

SIZES = {"1KB": 1024, "32KB": 32 * 1024, "512KB": 512 * 1024}
ALL = tuple(SIZES)
DIAGNOSTIC = frozenset({"shipped_nodecide_1msg"})
"""Variants measured only when named (``--variants``): diagnoses, not part of ``make bench``."""


def variants(names: Sequence[str] | None = None, sizes: Sequence[str] | None = None) -> list[Variant]:
    """Every configuration measured, side by side (or only ``names``, with bare Envoy always, on
    ``sizes``; the :data:`DIAGNOSTIC` variants only when named).

    A router variant measured on several body sizes gets its own process per size (named
    ``<name>_<size>`` beyond 1 KB), so that no process's history (heap grown by 512 KB bodies,
    learned ratios) biases another size or the 1 KB lever comparisons.

    Raises:
        ValueError: a name that is no variant, or a size that is not in :data:`SIZES`.
    """
    chosen = _variants()
    if names is None:
        chosen = [v for v in chosen if v.name not in DIAGNOSTIC]
    else:
        known = {v.name for v in chosen}
        unknown = sorted(set(names) - known)
        if unknown:
            raise ValueError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        chosen = [v for v in chosen if v.kind == "bare" or v.name in names]
    if sizes is not None:
        bad = sorted(set(sizes) - set(SIZES))
        if bad:
            raise ValueError(f"unknown size(s) {', '.join(bad)}; known: {', '.join(SIZES)}")
        chosen = [replace(v, sizes=tuple(s for s in v.sizes if s in sizes)) for v in chosen]
        chosen = [v for v in chosen if v.sizes]
    out = []
    for v in chosen:
        if v.kind == "bare" or len(v.sizes) == 1:
            out.append(v)
            continue
        for size in v.sizes:
            name = v.name if size == "1KB" else f"{v.name}_{size}"
            label = v.label if size == "1KB" else f"as `{v.name}`, own process for {size} bodies"
            out.append(replace(v, name=name, label=label, sizes=(size,)))
    return out


def _variants() -> list[Variant]:
    one = "one message (request headers SKIP, body BUFFERED, decision in dynamic metadata, buffer filter)"
    return [
        Variant("bare", "Envoy without ext_proc (the floor of Envoy itself)", kind="bare", sizes=ALL),
        Variant(
            "floor",
            "do-nothing grpc.aio ext_proc, 2 msgs/req (the Python+gRPC floor)",
            kind="floor",
            sizes=ALL,
        ),
        Variant(
            "floor_end",
            "do-nothing floor as `floor`, ending its call after the body answer as the router does"
            " (issue 12's leak-free stream end; the answer and the status sent together)",
            kind="floor",
            flags=["--end-call"],
        ),
        Variant(
            "floor_1msg",
            f"do-nothing grpc.aio ext_proc, {one}",
            kind="floor",
            one_message=True,
            sizes=ALL,
        ),
        Variant(
            "floor_1msg_uvloop",
            "do-nothing floor as `floor_1msg`, event loop uvloop (the loop config/router.yaml runs: the shipped"
            " default's floor on its own loop)",
            kind="floor",
            one_message=True,
            flags=["--uvloop"],
            sizes=ALL,
        ),
        Variant(
            "route",
            "router, routing only (`sample_rate: 0`, `skip_unsampled_responses: true` → 2 msgs/req)",
            sample_rate=0.0,
            sizes=ALL,
        ),
        Variant("route_1msg", f"router, routing only, {one}", one_message=True, sizes=ALL),
        Variant(
            "calib_10",
            "router, routing + calibration sampled at 10 % (decided at request_headers, ≈2.2 msgs/req)",
            sample_rate=0.1,
            sizes=ALL,
        ),
        Variant(
            "calib_10_1msg",
            "router, one message (envoy/envoy.yaml as deployed), calibration sampled at 10 % off the"
            " request path (sampled responses through the observability-mode filter, selected by the"
            " answer's dynamic metadata)",
            sample_rate=0.1,
            one_message=True,
            sizes=ALL,
        ),
        Variant(
            "calib_all_1msg",
            "router, one message, every response read off the request path (`sample_rate: 1`, the"
            " shipped default before issue 35)",
            sample_rate=1.0,
            one_message=True,
        ),
        Variant(
            "shipped_1msg",
            "**the shipped default**: config/router.yaml as shipped (learning everything it learns by"
            " default; responses read by the adaptive decision, `response_reads.mode: adaptive`; event loop"
            " uvloop, its `server.event_loop`, as `tbr serve` runs it), one message (envoy/envoy.yaml)",
            one_message=True,
            shipped=True,
            sizes=ALL,
        ),
        Variant(
            "shipped_nodecide_1msg",
            "the shipped default's process answering every body with its prebuilt first-pool answer without"
            " parsing or deciding (`--no-decide`; diagnosis: the servicer, stream, request line, metrics and"
            " stream end around the decision)",
            one_message=True,
            shipped=True,
            flags=["--no-decide"],
        ),
        Variant(
            "calib_10_off",
            "router, routing + calibration sampled at 10 % off the request path (`off_path`: sampled"
            " responses through the observability-mode filter, 2 msgs/req on the routing filter)",
            sample_rate=0.1,
            off_path=True,
            sizes=ALL,
        ),
        Variant("calib_all", "router, routing + calibration of every response (4 msgs/req)", sample_rate=1.0),
        Variant(
            "route_await",
            "router as `route`, awaiting its body answer's write before ending the call (before issue 15's"
            " eager last write)",
            flags=["--await-last-write"],
        ),
        Variant("uvloop", "router as `route`, event loop uvloop", flags=["--uvloop"]),
        Variant(
            "floor_uvloop", "do-nothing floor as `floor`, event loop uvloop", kind="floor", flags=["--uvloop"]
        ),
    ]
