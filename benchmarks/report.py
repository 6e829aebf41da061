"""Render the benchmark results as BENCHMARKS.md (medians over repetitions; ratios and added
latencies are computed per repetition against bare Envoy measured in the same repetition)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

__all__ = ["render", "render_side_by_side"]

TARGETS = {"rps_vs_floor": 0.9, "cpu_vs_floor": 1.2, "p99_ms": 1.5, "l80_p99_vs_floor": 1.2}
"""Issue 15: the router against the do-nothing floor with the same number of messages (1 KB body)."""


def _slice_s(p: dict[str, Any]) -> float:
    """Seconds of one unloaded hey run (older results: one ``hey_s`` run per repetition)."""
    return float(p.get("unloaded_s", p["hey_s"])) / int(p.get("unloaded_slices", 1))


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _rows(e2e: list[dict[str, Any]], phase: str, v: str, size: str) -> dict[int, dict[str, Any]]:
    return {m["rep"]: m for m in e2e if m["phase"] == phase and m["variant"] == v and m["size"] == size}


def summarize(e2e: list[dict[str, Any]], v: str, size: str) -> dict[str, float]:
    """Medians for one (variant, body): throughput, ratio, CPU, latencies, added latencies."""
    thr, bare = _rows(e2e, "throughput", v, size), _rows(e2e, "throughput", "bare", size)
    unl, bare_u = _rows(e2e, "unloaded", v, size), _rows(e2e, "unloaded", "bare", size)
    l80, bare80 = _rows(e2e, f"load80:{v}", v, size), _rows(e2e, f"load80:{v}", "bare", size)
    ref = _rows(e2e, "throughput", "route", size)
    s = {
        "rps": _med([m["rps"] for m in thr.values()]),
        "ratio": _med([thr[r]["rps"] / bare[r]["rps"] for r in thr if r in bare and bare[r]["rps"]]),
        "vs_route": _med([thr[r]["rps"] / ref[r]["rps"] for r in thr if r in ref and ref[r]["rps"]]),
        "cpu_ms": _med([m["router_cpu_ms_per_req"] for m in thr.values()]),
        "cpu_ms_200": _med([m["router_cpu_ms_per_req"] for m in unl.values()]),
        "envoy_cpu_ms": _med([m["envoy_cpu_ms_per_req"] for m in thr.values()]),
        "msgs": _med([m["msgs_per_req"] for m in thr.values()]),
        "short": _med([m["short_share"] for m in thr.values()]),
        "fail_open": sum(m["fail_open"] for m in list(thr.values()) + list(unl.values())),
        "errors": sum(m["errors"] for m in list(thr.values()) + list(unl.values())),
        "p50": _med([m["p50_ms"] for m in unl.values()]),
        "p99": _med([m["p99_ms"] for m in unl.values()]),
        "add_p50": _med([unl[r]["p50_ms"] - bare_u[r]["p50_ms"] for r in unl if r in bare_u]),
        "add_p99": _med([unl[r]["p99_ms"] - bare_u[r]["p99_ms"] for r in unl if r in bare_u]),
        "l80_rps": _med([m["rps"] for m in l80.values()]),
        "l80_p50": _med([m["p50_ms"] for m in l80.values()]),
        "l80_p99": _med([m["p99_ms"] for m in l80.values()]),
        "l80_add_p50": _med([l80[r]["p50_ms"] - bare80[r]["p50_ms"] for r in l80 if r in bare80]),
        "l80_add_p99": _med([l80[r]["p99_ms"] - bare80[r]["p99_ms"] for r in l80 if r in bare80]),
    }
    return s


def paired(
    e2e: list[dict[str, Any]], a: str, b: str, size: str, key: str, phase: str = "throughput"
) -> float:
    """Median over repetitions of ``a``'s ``key`` ÷ ``b``'s, each pair from the same repetition."""
    ra, rb = _rows(e2e, phase, a, size), _rows(e2e, phase, b, size)
    return _med([ra[r][key] / rb[r][key] for r in ra if r in rb and rb[r][key]])


def _l80_p99_ratio(e2e: list[dict[str, Any]], a: str, b: str, size: str) -> float:
    ra, rb = _rows(e2e, f"load80:{a}", a, size), _rows(e2e, f"load80:{b}", b, size)
    return _med([ra[r]["p99_ms"] / rb[r]["p99_ms"] for r in ra if r in rb and rb[r]["p99_ms"]])


def _f(x: float, nd: int = 2, sign: bool = False) -> str:
    if x != x:
        return "–"
    return f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}"


def _ok(cond: bool) -> str:
    return "**met**" if cond else "not met"


def _e2e_section(res: dict[str, Any]) -> list[str]:
    e2e = res["e2e"]
    out = []
    labels = {v["name"]: v["label"] for v in res["variants"]}
    for b in res["bodies"]:
        size = b["label"]
        names = [v["name"] for v in res["variants"] if size in v["sizes"]]
        out += [
            f"### Body {size} ({b['bytes']:,} B, {b['prompt_tokens']:,} cl100k prompt tokens)",
            "",
            "| variant | msgs/req | req/s | ÷ bare | router CPU ms/req at saturation / at 200 req/s | front-Envoy CPU ms/req | unloaded p50 / p99 ms | added p50 / p99 ms | 80 % load: req/s, p50 / p99 ms | added at 80 % p50 / p99 ms | routed short | fail-open / errors |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for v in names:
            s = summarize(e2e, v, size)
            bare = v == "bare"
            out.append(
                f"| `{v}` {labels[v]} | {_f(s['msgs'], 2) if not bare else '0'} | {_f(s['rps'], 0)} | "
                f"{_f(s['ratio'])} | "
                + (f"{_f(s['cpu_ms'], 3)} / {_f(s['cpu_ms_200'], 3)}" if not bare else "–")
                + f" | {_f(s['envoy_cpu_ms'], 3)} | "
                f"{_f(s['p50'])} / {_f(s['p99'])} | "
                + ("–" if bare else f"{_f(s['add_p50'], 2, True)} / {_f(s['add_p99'], 2, True)}")
                + " | "
                + ("–" if bare else f"{_f(s['l80_rps'], 0)}: {_f(s['l80_p50'])} / {_f(s['l80_p99'])}")
                + " | "
                + ("–" if bare else f"{_f(s['l80_add_p50'], 2, True)} / {_f(s['l80_add_p99'], 2, True)}")
                + f" | {_f(s['short'])} | {s['fail_open']} / {s['errors']} |"
            )
        out.append("")
    return out


def _targets(e2e: list[dict[str, Any]]) -> list[str]:
    t = TARGETS
    pairs = [("route", "floor"), ("route_1msg", "floor_1msg")]
    rps = [paired(e2e, a, b, "1KB", "rps") for a, b in pairs]
    cpu = [paired(e2e, a, b, "1KB", "router_cpu_ms_per_req") for a, b in pairs]
    p99 = [summarize(e2e, a, "1KB")["add_p99"] for a, _ in pairs]
    l80 = [_l80_p99_ratio(e2e, a, b, "1KB") for a, b in pairs]

    def row(title: str, vals: list[float], ok: Any, nd: int = 2, sign: bool = False) -> str:
        return f"| {title} | {_f(vals[0], nd, sign)} | {_f(vals[1], nd, sign)} | {_ok(ok(vals[0]))} / {_ok(ok(vals[1]))} |"

    return [
        row(f"throughput ÷ floor ≥ {t['rps_vs_floor']}", rps, lambda x: x >= t["rps_vs_floor"]),
        row(f"router CPU per request ÷ floor ≤ {t['cpu_vs_floor']}", cpu, lambda x: x <= t["cpu_vs_floor"]),
        row(
            f"added unloaded p99 over bare Envoy ≤ +{t['p99_ms']} ms",
            p99,
            lambda x: x <= t["p99_ms"],
            2,
            True,
        ),
        row(
            f"p99 at 80 % load ÷ floor's ≤ {t['l80_p99_vs_floor']}", l80, lambda x: x <= t["l80_p99_vs_floor"]
        ),
    ]


SHIPPED_TARGETS = {"rps_1KB": 0.9, "cpu_1KB": 1.2, "rps_32KB": 0.85, "rps_512KB": 0.7, "p99_ms": 1.5}
"""Issue 35: the shipped configuration (``shipped_1msg``) against the one-message floor."""


def _shipped_targets(e2e: list[dict[str, Any]]) -> list[str]:
    """Issue 35's targets: ``shipped_1msg`` (config/router.yaml as shipped, on the uvloop it names)
    against ``floor_1msg_uvloop``, the do-nothing floor on the same loop (the fair comparison, and the
    verdict); beside it the same against ``floor_1msg`` (asyncio, the floor the issue was filed
    against), ``calib_all_1msg`` (every response read: the shipped default before issue 35) and
    ``route_1msg`` (routing only), each against ``floor_1msg``."""
    if not any(m["variant"] == "shipped_1msg" for m in e2e):
        return []
    t = SHIPPED_TARGETS

    def name(v: str, size: str) -> str:
        return v if size == "1KB" else f"{v}_{size}"

    def pair(v: str, size: str, key: str, floor: str = "floor_1msg") -> float:
        if not any(m["variant"] == name(v, size) for m in e2e):
            return float("nan")
        return paired(e2e, name(v, size), name(floor, size), size, key)

    def add_p99(v: str) -> float:
        return summarize(e2e, v, "1KB")["add_p99"] if any(m["variant"] == v for m in e2e) else float("nan")

    rows: list[tuple[str, str, str, Callable[[float], bool], bool]] = [
        (f"1 KB: throughput ÷ floor ≥ {t['rps_1KB']}", "rps", "1KB", lambda x: x >= t["rps_1KB"], False),
        (
            f"1 KB: router CPU per request ÷ floor ≤ {t['cpu_1KB']}",
            "router_cpu_ms_per_req",
            "1KB",
            lambda x: x <= t["cpu_1KB"],
            False,
        ),
        (f"32 KB: throughput ÷ floor ≥ {t['rps_32KB']}", "rps", "32KB", lambda x: x >= t["rps_32KB"], False),
        (
            f"512 KB: throughput ÷ floor ≥ {t['rps_512KB']}",
            "rps",
            "512KB",
            lambda x: x >= t["rps_512KB"],
            False,
        ),
        (
            f"1 KB: added unloaded p99 over bare Envoy ≤ +{t['p99_ms']} ms",
            "",
            "1KB",
            lambda x: x <= t["p99_ms"],
            True,
        ),
    ]
    out = [
        "## Targets of the shipped default (issue 35; one message; against the one-message floor on the same"
        " event loop, per repetition)",
        "",
        "| target | **shipped default** (config/router.yaml, uvloop as it sets): `shipped_1msg` vs"
        " `floor_1msg_uvloop` (the do-nothing floor on the same loop: the fair comparison) | verdict |"
        " the same vs `floor_1msg` (asyncio floor) | before issue 35 (every response read): `calib_all_1msg`"
        " vs `floor_1msg` | routing only (asyncio): `route_1msg` vs `floor_1msg` |",
        "|---|---|---|---|---|---|",
    ]
    for title, key, size, ok, latency in rows:
        vals = [
            add_p99(name(v, size)) if latency else pair(v, size, key, floor)
            for v, floor in (
                ("shipped_1msg", "floor_1msg_uvloop"),
                ("shipped_1msg", "floor_1msg"),
                ("calib_all_1msg", "floor_1msg"),
                ("route_1msg", "floor_1msg"),
            )
        ]
        if latency:  # added over bare Envoy: one figure, whatever the floor
            vals[1] = float("nan")
        verdict = _ok(ok(vals[0])) if vals[0] == vals[0] else "–"
        others = " | ".join(_f(x, 2, latency) for x in vals[1:])
        out.append(f"| {title} | {_f(vals[0], 2, latency)} | {verdict} | {others} |")
    return [*out, ""]


def _floors_p99(e2e: list[dict[str, Any]]) -> str:
    """The do-nothing floors' own added unloaded p99, for the p99 target's context."""
    parts = []
    for v in ("floor", "floor_end", "floor_1msg"):
        if any(m["variant"] == v for m in e2e):
            parts.append(f"`{v}` {_f(summarize(e2e, v, '1KB')['add_p99'], 2, True)} ms")
    return (
        "Added unloaded p99 of the do-nothing floors in the same run: "
        + ", ".join(parts)
        + " (`floor_end` ends its call after the body answer, as the router does since issue 12)."
    )


def _messages(res: dict[str, Any]) -> list[str]:
    """One vs two ext_proc messages per request, and the Envoy-side ceiling, per body size."""
    e2e = res["e2e"]
    out = [
        "## One vs two ext_proc messages per request",
        "",
        "Ratios per repetition (median); CPU in ms per request at saturation. Envoy's ceiling: front-Envoy"
        " CPU per request without ext_proc ÷ with it bounds routed ÷ bare whatever the processor does.",
        "",
        "| body | design | floor req/s ÷ bare | router req/s ÷ bare | router ÷ floor req/s | router CPU ÷ floor CPU |"
        " front-Envoy CPU ms/req: bare / floor / router | Envoy-side ceiling (bare CPU ÷ floor's Envoy CPU) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in res["bodies"]:
        size = b["label"]
        bare = summarize(e2e, "bare", size)
        for design, route, floor in (("2 msgs", "route", "floor"), ("1 msg", "route_1msg", "floor_1msg")):
            if size != "1KB":  # a variant measured on several sizes has one process (and name) per size
                route, floor = f"{route}_{size}", f"{floor}_{size}"
            fs, rs = summarize(e2e, floor, size), summarize(e2e, route, size)
            out.append(
                f"| {size} | {design} | {_f(fs['ratio'])} | {_f(rs['ratio'])} | {_f(paired(e2e, route, floor, size, 'rps'))} | "
                f"{_f(paired(e2e, route, floor, size, 'router_cpu_ms_per_req'))} | "
                f"{_f(bare['envoy_cpu_ms'], 3)} / {_f(fs['envoy_cpu_ms'], 3)} / {_f(rs['envoy_cpu_ms'], 3)} | "
                f"{_f(bare['envoy_cpu_ms'] / fs['envoy_cpu_ms'] if fs['envoy_cpu_ms'] else float('nan'))} |"
            )
    out.append("")
    return out


def _levers(res: dict[str, Any]) -> list[str]:
    e2e = res["e2e"]
    base = summarize(e2e, "route", "1KB")
    rows = [
        ("one message per request (metadata routing, buffer filter)", "route_1msg", False),
        ("calibration of every response (4 msgs)", "calib_all", False),
        ("calibration sampled at 10 % (decided at request_headers)", "calib_10", False),
        ("calibration sampled at 10 %, off the request path (observability filter)", "calib_10_off", False),
        ("one message + calibration sampled at 10 % off the path (envoy/envoy.yaml)", "calib_10_1msg", False),
        ("one message + every response read off the path (`sample_rate: 1`)", "calib_all_1msg", False),
        ("one message + adaptive reads: the shipped config/router.yaml", "shipped_1msg", False),
        ("eager last write: the body answer and the status sent together", "route_await", True),
        ("uvloop event loop", "uvloop", False),
        ("(floor) end the call after the body answer, as the router does", "floor_end", False),
    ]
    out = [
        "| lever (1 KB body) | compared | req/s ÷ `route` (same rep) | ÷ bare | router CPU ms/req (saturation / 200 req/s) | added unloaded p50 / p99 ms |",
        "|---|---|---|---|---|---|",
        f"| baseline `route` (2 msgs) | – | 1.00 | {_f(base['ratio'])} | {_f(base['cpu_ms'], 3)} / {_f(base['cpu_ms_200'], 3)} | {_f(base['add_p50'], 2, True)} / {_f(base['add_p99'], 2, True)} |",
    ]
    for title, v, inverse in rows:
        s = summarize(e2e, v, "1KB")
        rel = s["vs_route"]
        note = f"lever OFF (`{v}`, {_f(s['msgs'])} msgs)" if inverse else f"`{v}`"
        out.append(
            f"| {title} | {note} | {_f(rel)} | {_f(s['ratio'])} | {_f(s['cpu_ms'], 3)} / {_f(s['cpu_ms_200'], 3)} | "
            f"{_f(s['add_p50'], 2, True)} / {_f(s['add_p99'], 2, True)} |"
        )
    return out


def _header(res: dict[str, Any]) -> list[str]:
    """Machine, software, setup, load and bodies of a run."""
    m = res["machine"]
    p = res["params"]
    return [
        f"- machine: `{m['host']}`, {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, Linux {m['kernel']};"
        f" load average at start {' '.join(m['loadavg_start'])}, at end {' '.join(m.get('loadavg_end', []))}"
        " (the box is shared: compare ratios measured side by side, not absolute figures)",
        f"- software: Python {m['python']}, grpcio {m['grpcio']}, protobuf {m['protobuf']}, Envoy {m['envoy']}; commit `{m['commit']}`",
        "- setup: front Envoy `--concurrency 1` with one listener per variant (same ext_proc settings as envoy/envoy.yaml),"
        " upstream = a second Envoy `--concurrency 1` answering `direct_response` JSON with the body's true `usage`,"
        " each router variant in its own process(es); loopback only",
        f"- load: `wrk -t1 -c16 -d{p['wrk_s']:g}s --latency -s post.lua` (throughput, CPU), `hey -z {_slice_s(p):.3g}s -c 1 -q 200 -o csv`"
        f" (unloaded: {p.get('unloaded_slices', 1)} interleaved rounds of every variant per repetition, each pair's"
        " samples pooled over its rounds, each run's first request, which dials, left out), `hey -c 8 -q <0.8×capacity/8>` (80 % load, back to back with bare at the same rate);"
        f" {p['reps']} throughput and {p.get('latency_reps', p['reps'])} unloaded-latency and 80 %-load repetition(s);"
        " every variant in every repetition, in a seeded shuffled order; medians shown",
        "- CPU per request = Δ(utime+stime) of the process(es) from /proc/<pid>/stat ÷ completed requests, during the"
        " wrk run (saturation) and during the 200 req/s hey run (no batching: each request wakes the process)",
        f"- bodies: {res['bodies'][0]['source']}",
        "",
    ]


def render(res: dict[str, Any]) -> str:
    """The whole BENCHMARKS.md."""
    e2e = res["e2e"]
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench` (`{res['command']}`) on {res['date']}, {res['elapsed_s'] / 60:.1f} min"
        + (" (**--quick**: 1 repetition, short runs)" if res["quick"] else "")
        + ". Do not edit by hand; see docs/performance.md for how to read it.",
        "",
        *_header(res),
        *_shipped_targets(e2e),
        "## Targets (issue 15; 1 KB body; the router against the do-nothing floor with the same messages, per repetition)",
        "",
        "| target | 2 messages (Envoy Gateway, Istio): `route` vs `floor` | 1 message (envoy/envoy.yaml): `route_1msg` vs `floor_1msg` | verdict (2 / 1 msgs) |",
        "|---|---|---|---|",
        *_targets(e2e),
        "",
        _floors_p99(e2e),
        "",
        *_messages(res),
        "## Side by side through Envoy",
        "",
    ]
    lines += _e2e_section(res)
    lines += ["## Levers (each measured on/off in the same run)", "", *_levers(res), ""]
    spread = res.get("x2_endpoint_requests", {})
    if spread:
        tot = sum(spread.values()) or 1
        lines += [
            "### How Envoy spreads ext_proc streams over 2 router processes",
            "",
            "Requests Envoy's `ext_proc_x2` cluster sent to each endpoint over the whole run (`/clusters` rq_total):"
            + ", ".join(f" port {k}: {v:,} ({v / tot:.0%})" for k, v in spread.items())
            + ". Each ext_proc stream is one HTTP/2 request, and ROUND_ROBIN picks an endpoint per stream, so load"
            " spreads per request even though Envoy multiplexes the streams on one HTTP/2 connection per endpoint.",
            "",
        ]
    lines += (
        _event_loop(res)
        + _wakeups(res)
        + _phase_time(res)
        + _profile(res)
        + _micro(res)
        + _convergence(res)
        + _read_replay(res)
        + _memory(res)
    )
    for _, text in res.get("external", []):
        lines += [text.rstrip(), ""]
    return "\n".join(lines) + "\n"


def render_side_by_side(res: dict[str, Any]) -> str:
    """The report of a run of a few variants (``python -m benchmarks.run --variants …``): each
    router against the one-message floor per repetition, the side-by-side tables and each router's
    time per message."""
    e2e = res["e2e"]
    lines = [
        "# Side by side",
        "",
        f"Written by `{res['command']}` on {res['date']}, {res['elapsed_s'] / 60:.1f} min.",
        "",
        *_header(res),
        *_shipped_targets(e2e),
        *_per_repetition(res),
        *_e2e_section(res),
        *_phase_time(res),
    ]
    return "\n".join(lines) + "\n"


def _per_repetition(res: dict[str, Any]) -> list[str]:
    """Every router variant's req/s and router CPU per request ÷ its body's ``floor_1msg``, in each
    throughput repetition (the spread shows how noisy the box was)."""
    e2e = res["e2e"]
    out = [
        "## Per repetition, against the one-message floors (req/s ratio; router CPU per request ratio)",
        "",
        "| variant | body | floor | per repetition: req/s ÷ floor | median | per repetition: CPU ÷ floor | median |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in res["variants"]:
        name, size = v["name"], v["sizes"][0] if len(v["sizes"]) == 1 else "1KB"
        for base in ("floor_1msg", "floor_1msg_uvloop"):
            floor = base if size == "1KB" else f"{base}_{size}"
            if name == "bare" or name.startswith("floor") or not any(m["variant"] == floor for m in e2e):
                continue
            a, b = _rows(e2e, "throughput", name, size), _rows(e2e, "throughput", floor, size)
            reps = [r for r in sorted(a) if r in b and b[r]["rps"] and b[r]["router_cpu_ms_per_req"]]
            rps = [a[r]["rps"] / b[r]["rps"] for r in reps]
            cpu = [a[r]["router_cpu_ms_per_req"] / b[r]["router_cpu_ms_per_req"] for r in reps]
            out.append(
                f"| `{name}` | {size} | `{floor}` | {', '.join(_f(x) for x in rps)} | {_f(_med(rps))} | "
                f"{', '.join(_f(x) for x in cpu)} | {_f(_med(cpu))} |"
            )
    return [*out, ""]


def _event_loop(res: dict[str, Any]) -> list[str]:
    """Router ÷ floor with each event loop (1 KB, 2 msgs), and uvloop ÷ asyncio for each."""
    e2e = res["e2e"]
    if not _rows(e2e, "throughput", "floor_uvloop", "1KB"):
        return []
    out = [
        "## Event loop: asyncio against uvloop (1 KB body, 2 msgs; paired per repetition)",
        "",
        "| compared | req/s ratio | router CPU per request ratio (saturation) | CPU ratio at 200 req/s |",
        "|---|---|---|---|",
    ]
    for title, a, b in (
        ("router ÷ floor, both asyncio (`route` ÷ `floor`)", "route", "floor"),
        ("router ÷ floor, both uvloop (`uvloop` ÷ `floor_uvloop`)", "uvloop", "floor_uvloop"),
        ("router: uvloop ÷ asyncio (`uvloop` ÷ `route`)", "uvloop", "route"),
        ("floor: uvloop ÷ asyncio (`floor_uvloop` ÷ `floor`)", "floor_uvloop", "floor"),
    ):
        out.append(
            f"| {title} | {_f(paired(e2e, a, b, '1KB', 'rps'))} | "
            f"{_f(paired(e2e, a, b, '1KB', 'router_cpu_ms_per_req'))} | "
            f"{_f(paired(e2e, a, b, '1KB', 'router_cpu_ms_per_req', phase='unloaded'))} |"
        )
    return [*out, ""]


def _wakeups(res: dict[str, Any]) -> list[str]:
    """Per-request context switches and system calls (benchmarks/wakeups.py)."""
    w = res.get("wakeups")
    if not w:
        return []
    out = [
        f"## Wakeups and system calls per request (1 KB body, `hey` at {w['rate']:g} req/s, {w['duration_s']:g} s each)",
        "",
        "Context switches summed over the ext_proc process's threads (`/proc/<pid>/task/*/status`);"
        " system calls from a second run under `strace -c -f -p` (which slows the process: only its counts are read).",
        "",
        "| variant | requests | CPU ms/req | voluntary / involuntary ctx switches per req | system calls per req | top system calls per req |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in w["variants"].items():
        sc = m.get("syscalls", {})
        if "error" in sc:
            total, top = "–", f"strace failed: {sc['error'][:80]}"
        else:
            total = f"{sum(sc.values()):.1f}"
            top = ", ".join(f"{k} {v:.2f}" for k, v in list(sc.items())[:10])
        out.append(
            f"| `{name}` | {m['requests']:,} | {m['cpu_ms']:.3f} | {m['vol']:.2f} / {m['invol']:.2f} | {total} | {top} |"
        )
    return [*out, ""]


def _phase_time(res: dict[str, Any]) -> list[str]:
    """Mean time of ``StreamProcessor.handle`` per message, in the router processes under load."""
    pt = res.get("phase_time")
    if not pt:
        return []
    out = [
        "## The router's own work per message, measured inside the running routers",
        "",
        "Mean of `tbr_phase_processing_seconds` (wall time of `StreamProcessor.handle`: parse, estimate,"
        " decide, metrics; no awaits inside) over the whole run of each 1 KB router process, read when it"
        " stopped. Wall time: under wrk the 2 cores are oversubscribed (Envoy ×2, wrk, the router), so it"
        " includes time the thread waited for a CPU; the in-process micro-benchmarks below are the hot-cache"
        " floor of the same work.",
        "",
        "| router process | messages | request_headers µs | request_body µs | response_headers µs | response_body µs | request_headers + request_body µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, phases in pt.items():
        if any(name.endswith(f"_{size}") for size in ("32KB", "512KB")):
            continue
        mean = {k: (v[0] / v[1] * 1e6 if v[1] else float("nan")) for k, v in phases.items()}
        n = int(sum(v[1] for v in phases.values()))
        two = mean.get("request_headers", 0.0) + mean.get("request_body", float("nan"))
        cells = " | ".join(
            _f(mean.get(k, float("nan")), 1)
            for k in ("request_headers", "request_body", "response_headers", "response_body")
        )
        out.append(f"| `{name}` | {n:,} | {cells} | {_f(two, 1)} |")
    return [*out, ""]


def _profile(res: dict[str, Any]) -> list[str]:
    out = ["## Where the time goes (py-spy, 1 KB body under wrk load, `--native`)", ""]
    for name, prof in res.get("profile", {}).items():
        if "error" in prof:
            out += [f"- `{name}`: py-spy failed: {prof['error']}", ""]
            continue
        out += [
            f"**`{name}`** ({prof['samples']:,} busy samples at 250 Hz; {prof.get('idle_samples', 0):,} idle"
            " samples in epoll/condvar waits dropped). Self time by layer:",
            "",
        ]
        out += ["| layer (self) | share of busy samples |", "|---|---|"]
        out += [f"| {g} | {share:.0%} |" for g, share in prof.get("layers", [])]
        out += [
            "",
            "Inclusive (stacks passing through):",
            "",
            "| code | share of busy samples |",
            "|---|---|",
        ]
        out += [f"| {g} | {share:.0%} |" for g, share in prof["groups"]]
        out += ["", "Top self frames:", "", "| frame | self share |", "|---|---|"]
        out += [f"| `{f}` | {share:.1%} |" for f, share in prof["top_self"]]
        out.append("")
    return out


def _micro(res: dict[str, Any]) -> list[str]:
    mi = res["micro"]
    out = [
        "## In-process micro-benchmarks (best of 7, µs per call)",
        "",
        "| body | stdlib `json.loads` | `orjson.loads` | `parse_request_body` (orjson, only the fields the estimate needs; runs counted later) | exact estimate (run counts + ratio) | processor, both messages incl. protobuf (byte bound where it decides) |",
        "|---|---|---|---|---|---|",
    ]
    for r in mi["rows"]:
        out.append(
            f"| {r['size']} | {r['json_loads_us']:.1f} | {r['orjson_loads_us']:.1f} | {r['parse_request_body_us']:.1f} | {r['estimate_us']:.1f} | {r['processor_2msg_us']:.1f} |"
        )
    st = mi["stall"]
    out += [
        "",
        f"- routing response built per request + serialised: {mi['response_built_us']:.1f} µs; precomputed"
        f" (what the router does): {mi['response_prebuilt_us']:.2f} µs.",
        f"- {st['size']} body, event-loop stall: parsed on the loop → longest loop gap {st['inline_max_gap_ms']:.1f} ms"
        f" ({st['inline_wall_ms']:.1f} ms per parse); in `asyncio.to_thread` → longest gap {st['thread_max_gap_ms']:.1f} ms"
        f" ({st['thread_wall_ms']:.1f} ms per parse). orjson holds the GIL, so a thread does not free the loop;"
        " the parse stays on the loop.",
        "",
    ]
    return out


def _convergence(res: dict[str, Any]) -> list[str]:
    c = res["convergence"]
    out = [
        "## Calibration still converges when only a sample of responses is read",
        "",
        f"Scripted ext_proc replay over real gRPC ({c['source']}, one request each; true `usage.prompt_tokens` ="
        " cl100k count + chat framing). Unsampled requests end after `request_body`, as Envoy ends them after the"
        " `mode_override`.",
        "",
        "| sample_rate | requests | sampled | ext_proc msgs/req | learned ĉ latin (true mean) | learned ĉ code_data (true mean) | mean abs error of estimate, first → last tenth | under-estimates, last tenth |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in c["runs"]:
        lat = r["learned_ratio"].get("latin", float("nan"))
        code = r["learned_ratio"].get("code_data", float("nan"))
        out.append(
            f"| {r['sample_rate']} | {r['requests']} | {r['sampled']} | {r['messages'] / max(r['requests'], 1):.2f} | "
            f"{_f(lat)} ({_f(r['true_ratio'].get('latin', float('nan')))}) | {_f(code)} ({_f(r['true_ratio'].get('code_data', float('nan')))}) | "
            f"{r['window_abs_err'][0]:.1%} → {r['window_abs_err'][-1]:.1%} | {r['window_under'][-1]:.0%} |"
        )
    out += [
        "",
        "Rare categories get proportionally fewer observations (warm-up lasts 1/sample_rate times longer).",
        "",
    ]
    return out


def _read_replay(res: dict[str, Any]) -> list[str]:
    reports = res.get("read_replay")
    if not reports:
        return []
    from evaluation.read_replay import render_rows

    out = [
        "## Adaptive reads learn as fast as reading every response (issue 35)",
        "",
        "`evaluation.read_replay`: the same seeded replay from a cold start through the router's estimator"
        " (shipped calibration, Llama-3 ground truth), learning from every response or from those the"
        " adaptive decision (`calibration.response_reads.mode: adaptive`, shipped) reads, requests routed as"
        " the router routes them, the decision's clock at 10 / 100 / 1,000 req/s. Mean |routing estimate −"
        " true| / true per part of the replay (the first tenth is the cold start); harmful/wasteful misroutes"
        " at B = 2,048 / 4,096 / 8,192.",
        "",
        "| corpus (requests) | reads | share read | first tenth | tenths 2–5 | tenths 6–10 | misroutes harmful/wasteful |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        if "error" in r:
            out.append(f"| {r['corpus']} | skipped: {r['error']} | | | | | |")
        else:
            out += render_rows(r)
    return [*out, ""]


def _memory(res: dict[str, Any]) -> list[str]:
    mem, g = res["memory"], res["growth"]
    mib = 2**20
    out = [
        "## Memory",
        "",
        f"- idle router RSS: {mem['idle_rss'] / mib:.1f} MiB.",
    ]
    for i, w in enumerate(mem["waves"]):
        out.append(
            f"- wave {i + 1}: {mem['concurrency']:,} concurrent streaming requests held {mem['hold_s']:g} s each"
            f" (router reads every SSE response): {w['completed_streams']:,} completed,"
            f" {w.get('peak_open_ext_proc_streams', 0):,} ext_proc streams open at once, peak RSS"
            f" {w['peak_rss'] / mib:.1f} MiB, RSS after {w['after_rss'] / mib:.1f} MiB."
        )
    out += [
        f"- ≈ {mem['per_stream_bytes'] / 1024:.1f} KiB per open stream; growth from wave 1 to wave 2:"
        f" {mem['growth_per_request_bytes']:.1f} B per request.",
        "- RSS of the `calib_all` router over successive wrk rounds (requests so far → MiB): "
        + ", ".join(f"{n:,} → {r / mib:.1f}" for n, r in g["points"])
        + f"; slope after the first round {g['bytes_per_request_after_first_round']:.2f} B/request.",
        "",
    ]
    return out
