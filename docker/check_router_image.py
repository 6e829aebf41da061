"""The router image alone, started with only ``-p`` flags, serves requests through a local Envoy.

`docker/test-compose.sh` runs ``docker run -d -p 127.0.0.1::50051 -p 127.0.0.1::9190
token-budget-router:VERSION`` (no config mounted, no environment) and then this script, which
starts two stand-in pools and Envoy (envoy/envoy.yaml rendered by devstack) on loopback, with
Envoy's ext_proc cluster pointing at the container's published gRPC port, and sends a short and a
long request. The router must have routed both (its own ``/metrics``, on the published admin port).

Exit status 0 when both requests came back from the expected pool and the router counted them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import httpx
import openai

from devstack.envoy_runner import EnvoyPorts
from devstack.procs import free_port
from devstack.stack import envoy_process, pool_process
from mockpool.settings import DEFAULT_MODEL_NAMES

MODEL = DEFAULT_MODEL_NAMES["qwen3"][0]
"""What the stand-in pools serve by default (they answer 404 for any other model, as vLLM does)."""

SHORT_PROMPT = "Name three uses of a load balancer."
LONG_PROMPT = "Summarise these notes.\n\n" + "Token budgets decide which pool serves a request. " * 1500


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns the process exit code."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grpc-port", type=int, required=True, help="published ext_proc port on 127.0.0.1")
    ap.add_argument("--admin-port", type=int, required=True, help="published admin port on 127.0.0.1")
    args = ap.parse_args(argv)
    ports = EnvoyPorts(free_port(), free_port(), args.grpc_port, free_port(), free_port())
    with tempfile.TemporaryDirectory(prefix="tbr-image-check-") as tmp:
        log_dir = Path(tmp)
        procs = [
            pool_process("short", ports.short_pool, 8192, log_dir=log_dir),
            pool_process("long", ports.long_pool, 65536, log_dir=log_dir),
            envoy_process(ports, log_dir=log_dir),
        ]
        try:
            for p in procs:
                p.start()
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{ports.listener}/v1",
                api_key="unused",
                max_retries=0,
                timeout=60.0,
            )
            served = {}
            for kind, prompt in (("short", SHORT_PROMPT), ("long", LONG_PROMPT)):
                raw = client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=8
                )
                raw.parse()
                served[kind] = raw.headers.get("x-served-by-pool", "")
            metrics = httpx.get(f"http://127.0.0.1:{args.admin_port}/metrics", timeout=5.0).text
        finally:
            for p in reversed(procs):
                p.stop()
    decisions = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("tbr_routing_decisions_total{")
    )
    ok = served == {"short": "short", "long": "long"} and decisions == 2
    print(
        f"{'ok  ' if ok else 'FAIL'} docker run with only -p flags: x-served-by-pool {served}, "
        f"router decisions {decisions:g} (want short/long and 2)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
