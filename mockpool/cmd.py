"""``tbr mock-pool``: run one stand-in vLLM pool (for the demo, compose and manual tests).

Example::

    tbr mock-pool --name short --port 8101 --max-model-len 8192 --tokenizer qwen3
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from types import FrameType
from typing import Any

from mockpool.logs import configure_logging
from mockpool.server import bind_socket, make_server
from mockpool.settings import PoolSettings
from mockpool.tokencount import TokenizerUnavailableError

log = logging.getLogger("mockpool")


def add_parser(subparsers: Any) -> None:
    """Register the ``mock-pool`` subcommand on ``subparsers`` (from ``argparse.add_subparsers``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "mock-pool",
        help="run a stand-in vLLM pool (OpenAI-compatible, real tokenizer)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = PoolSettings()
    p.add_argument("--name", required=True, help="pool name, sent back in the x-served-by-pool header")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default %(default)s)")
    p.add_argument(
        "--port", type=_port, default=8000, help="TCP port, 0 = any free port (default %(default)s)"
    )
    p.add_argument("--max-model-len", type=int, default=d.max_model_len, help="vLLM max_model_len in tokens")
    p.add_argument("--tokenizer", choices=["qwen3", "llama3"], default=d.tokenizer, help="tokenizer family")
    p.add_argument(
        "--served-model-name", action="append", default=[], help="model name to serve (repeatable)"
    )
    p.add_argument(
        "--strict-model",
        action="store_true",
        help="404 for models not served (the default, as vLLM; kept for old scripts)",
    )
    p.add_argument(
        "--any-model", action="store_true", help="accept any model name and echo it back (not vLLM behaviour)"
    )
    p.add_argument("--output-tokens", type=int, default=d.output_tokens, help="tokens generated per choice")
    p.add_argument(
        "--natural-output-tokens",
        default=d.natural_output_tokens,
        metavar="fixed:N|lognormal:MEDIAN:SIGMA",
        help="the model's natural answer length per request (seeded draw); cut like vLLM at "
        "max_tokens or max_model_len - prompt with finish_reason length (default: --output-tokens)",
    )
    p.add_argument("--natural-output-seed", type=int, default=0, help="seed of the natural-length draws")
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs, help="vLLM max_num_seqs")
    p.add_argument("--kv-cache-capacity-tokens", type=int, default=0, help="KV capacity, 0 = len × seqs")
    p.add_argument("--time-to-first-token-s", type=float, default=0.0, help="delay before the first token")
    p.add_argument("--prefill-s-per-token", type=float, default=0.0, help="extra first-token delay per token")
    p.add_argument("--inter-token-latency-s", type=float, default=0.0, help="delay between tokens")
    p.add_argument(
        "--sse-split-bytes", type=int, default=0, help="split each SSE event into writes of N bytes"
    )
    p.add_argument("--gzip", action="store_true", help="gzip JSON responses when the client accepts it")
    p.add_argument("--image-tokens", type=int, default=d.image_tokens, help="prompt tokens per image part")
    p.add_argument(
        "--image-rule",
        choices=["flat", "qwen2.5-vl"],
        default=d.image_rule,
        help="image token count: flat --image-tokens per part, or Qwen2.5-VL's 28-pixel patches",
    )
    p.add_argument(
        "--audio-tokens-per-second",
        type=float,
        default=d.audio_tokens_per_second,
        help="audio part tokens per second of its duration (+2), read from its header; 0 = count like an image part",
    )
    p.add_argument("--hold", action="store_true", help="start held (release with POST /admin/release)")
    p.add_argument(
        "--context-error-in-stream",
        action="store_true",
        help="answer a streamed request that does not fit with a 200 SSE error event (SGLang) instead of 400",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--log-format", default="json", choices=["json", "text"], help="log line format (as tbr serve)"
    )
    p.set_defaults(func=run)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0..65535")
    return port


def settings_from_args(args: argparse.Namespace) -> PoolSettings:
    """:class:`PoolSettings` from parsed ``tbr mock-pool`` arguments (raises ``ValueError`` if invalid)."""
    return PoolSettings(
        name=args.name,
        max_model_len=args.max_model_len,
        tokenizer=args.tokenizer,
        served_model_names=tuple(args.served_model_name),
        strict_model=not args.any_model,
        output_tokens=args.output_tokens,
        natural_output_tokens=args.natural_output_tokens,
        natural_output_seed=args.natural_output_seed,
        max_num_seqs=args.max_num_seqs,
        kv_cache_capacity_tokens=args.kv_cache_capacity_tokens,
        time_to_first_token_s=args.time_to_first_token_s,
        prefill_s_per_token=args.prefill_s_per_token,
        image_rule=args.image_rule,
        inter_token_latency_s=args.inter_token_latency_s,
        sse_split_bytes=args.sse_split_bytes,
        gzip=args.gzip,
        image_tokens=args.image_tokens,
        audio_tokens_per_second=args.audio_tokens_per_second,
        hold=args.hold,
        context_error_in_stream=args.context_error_in_stream,
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; return 0, or 2 on bad settings / missing tokenizer / busy port."""
    configure_logging(args.log_level, args.log_format)
    try:
        settings = settings_from_args(args)
        server = make_server(
            settings, log_level=args.log_level, access_log=args.log_level == "debug", own_logging=False
        )
        sock = bind_socket(args.host, args.port)
    except (ValueError, TokenizerUnavailableError, OSError) as exc:
        print(f"tbr mock-pool: {exc}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    log.info(
        "pool %s serving %s (tokenizer %s, max_model_len %d) on http://%s:%d",
        settings.name,
        ",".join(settings.model_names),
        settings.tokenizer,
        settings.max_model_len,
        host,
        port,
    )
    # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal to the previous handler;
    # turn that into a clean exit code 0 (compose's `docker stop` and Ctrl-C are normal stops).
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
    log.info("pool %s stopped", settings.name)
    return 0


class _Stop(Exception):
    """Raised by the SIGTERM handler once uvicorn has finished its graceful shutdown."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)
