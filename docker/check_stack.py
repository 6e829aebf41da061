"""Checks `make test-compose` runs against the running compose stack (docker/test-compose.sh).

Sends chat completions with the openai client through Envoy's published loopback port and
verifies, with Prometheus (also on loopback) as the observer:

1. short requests are served by the short pool and long ones by the long pool
   (``x-served-by-pool`` set by the stand-in pool that answered);
2. both router replicas served ext_proc streams (Envoy balances the ``ext_proc`` cluster);
3. the replicas share learned ratios through Redis: each replica's ``tbr_ratio_samples`` counts
   the observations of both replicas (more than it routed itself), the same on both;
4. every Prometheus target (2 routers, Envoy, 2 pools) is up.

Exit status 0 when all hold, 1 otherwise (each failed check is printed).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import openai

SHORT_PROMPT = "In two sentences, what does a reverse proxy do in front of an inference server?"
# ~64 KiB of prose: far above the short pool's max_model_len (8192 tokens) at any byte/token ratio.
LONG_PARAGRAPH = (
    "Capacity planning for a fleet of inference servers starts from the distribution of request "
    "lengths, because the memory a sequence needs grows with its context and the batch size a pool "
    "can sustain shrinks accordingly. "
)
LONG_PROMPT = "Summarise the following notes.\n\n" + LONG_PARAGRAPH * (65536 // len(LONG_PARAGRAPH))


def chat(client: openai.OpenAI, prompt: str) -> str:
    """Send one chat completion; return the ``x-served-by-pool`` response header ('' if absent)."""
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": prompt}], max_tokens=16
    )
    completion = raw.parse()
    assert completion.choices, "completion without choices"
    return raw.headers.get("x-served-by-pool", "")


def promql(prom: httpx.Client, expr: str) -> list[dict[str, Any]]:
    """Instant query; returns Prometheus' result vector."""
    r = prom.get("/api/v1/query", params={"query": expr})
    r.raise_for_status()
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return result


def by_instance(prom: httpx.Client, expr: str) -> dict[str, float]:
    """``expr`` aggregated ``by (instance)`` → {instance: value}."""
    return {
        s["metric"]["instance"]: float(s["value"][1]) for s in promql(prom, f"sum by (instance) ({expr})")
    }


def eventually(what: str, check: Callable[[], str | None], timeout_s: float = 60.0) -> str | None:
    """Poll ``check`` (returns None when satisfied, else the reason) until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        reason = check()
        if reason is None:
            print(f"ok   {what}")
            return None
        if time.monotonic() > deadline:
            print(f"FAIL {what}: {reason}")
            return reason
        time.sleep(2.0)


def main(argv: list[str] | None = None) -> int:
    """Run the checks; returns the process exit code."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envoy", required=True, help="HOST:PORT of Envoy's published listener")
    ap.add_argument("--prometheus", required=True, help="HOST:PORT of Prometheus")
    ap.add_argument("--short", type=int, default=30, help="short requests to send")
    ap.add_argument("--long", type=int, default=4, help="long requests to send")
    ap.add_argument("--compose", help="unused: kept for the caller's symmetry")
    ap.add_argument("--project", help="unused: kept for the caller's symmetry")
    args = ap.parse_args(argv)

    client = openai.OpenAI(base_url=f"http://{args.envoy}/v1", api_key="unused", max_retries=0, timeout=60.0)
    prom = httpx.Client(base_url=f"http://{args.prometheus}", timeout=10.0)
    failures: list[str] = []

    short_pools = [chat(client, SHORT_PROMPT) for _ in range(args.short)]
    long_pools = [chat(client, LONG_PROMPT) for _ in range(args.long)]
    sent = args.short + args.long
    for kind, pools, want in (("short", short_pools, "short"), ("long", long_pools, "long")):
        served = {p: pools.count(p) for p in set(pools)}
        if served == {want: len(pools)}:
            print(f"ok   {len(pools)} {kind} requests served by x-served-by-pool: {want}")
        else:
            print(f"FAIL {kind} requests: x-served-by-pool counts {served}, want all {want!r}")
            failures.append(kind)

    def targets_up() -> str | None:
        active = prom.get("/api/v1/targets").raise_for_status().json()["data"]["activeTargets"]
        jobs: dict[str, list[str]] = {}
        for t in active:
            jobs.setdefault(t["labels"]["job"], []).append(t["health"])
        want = {"tbr-router": 2, "envoy": 1, "pools": 2}
        got = {job: healths.count("up") for job, healths in jobs.items()}
        return None if got == want else f"up targets by job {got}, want {want}"

    def both_replicas_routed() -> str | None:
        decisions = by_instance(prom, "tbr_routing_decisions_total")
        if len(decisions) != 2 or sum(decisions.values()) != sent or min(decisions.values()) < 1:
            return f"decisions by replica {decisions}, want 2 replicas summing to {sent}"
        print(f"     decisions by replica: {decisions}")
        return None

    def ratios_shared() -> str | None:
        up = by_instance(prom, "tbr_ratio_store_up")
        samples = by_instance(prom, 'tbr_ratio_samples{model_name="m"}')
        own = by_instance(prom, "tbr_routing_decisions_total")
        if len(up) != 2 or min(up.values()) != 1:
            return f"tbr_ratio_store_up {up}"
        if len(samples) != 2 or len(set(samples.values())) != 1:
            return f"ratio samples differ between replicas: {samples}"
        if any(samples[i] <= own.get(i, 0) for i in samples):
            return f"a replica's samples {samples} do not exceed what it routed itself {own}"
        print(f"     ratio samples (model m) on each replica: {samples}; routed itself: {own}")
        return None

    for what, check in (
        ("Prometheus targets up (2 routers, Envoy, 2 pools)", targets_up),
        ("both router replicas served ext_proc streams", both_replicas_routed),
        ("replicas share learned ratios through Redis", ratios_shared),
    ):
        if eventually(what, check) is not None:
            failures.append(what)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
