"""Property-based tests (hypothesis): request bodies, SSE streams, content decoders, and scripted
ext_proc message sequences. The processor never raises, never hits its internal-error path, and
always answers the phase it was sent; parsers raise only their documented errors."""

from __future__ import annotations

import json
import random

from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extproc.adapter.processor import StreamProcessor
from extproc.adapter.runtime import Runtime
from extproc.config import parse_config
from extproc.core.learn.outcomes import STREAM_ENDS, StreamEnd
from extproc.core.request.request_body import RequestFeatures, UnreadableRequest, parse_request_body
from extproc.core.response.encoding import DecodeError, make_decoder
from extproc.core.response.sse import SSEUsageReader
from extproc.service.metrics import PrometheusObserver, RouterMetrics
from tests.hardening.helpers import CONFIG

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ_HEAVY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
json_value = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=8,
)
part = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "input_text"]), "text": st.one_of(st.text(max_size=40), json_leaf)}
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["image_url", "input_audio", "file", "refusal", "weird"])}
    ),
    json_value,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool"])},
    optional={
        "content": st.one_of(st.text(max_size=80), st.lists(part, max_size=4), json_value),
        "tool_calls": st.lists(
            st.one_of(
                st.fixed_dictionaries(
                    {
                        "function": st.fixed_dictionaries(
                            {"name": st.text(max_size=10), "arguments": json_value}
                        )
                    }
                ),
                json_value,
            ),
            max_size=2,
        ),
    },
)
chat_request = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(message, max_size=5), json_value)},
    optional={
        "model": st.one_of(st.text(max_size=20), json_leaf),
        "max_tokens": json_leaf,
        "max_completion_tokens": json_leaf,
        "n": json_leaf,
        "best_of": json_leaf,
        "stream": json_leaf,
        "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": json_leaf}), json_value),
        "tools": st.one_of(st.lists(json_value, max_size=3), json_value),
        "functions": json_value,
        "prompt": st.one_of(st.text(max_size=40), st.lists(st.integers(0, 10**6), max_size=5), json_value),
        "suffix": json_leaf,
    },
)


def _encode(obj: object, ascii_only: bool) -> bytes:
    return json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


encoded_request = st.builds(_encode, chat_request, st.booleans())


@FUZZ_HEAVY
@given(
    body=st.one_of(encoded_request, st.binary(max_size=200)),
    endpoint=st.sampled_from(["chat", "completions"]),
)
def test_parse_request_body_only_raises_unreadable(body: bytes, endpoint: str) -> None:
    try:
        f = parse_request_body(body, endpoint)
    except UnreadableRequest as exc:
        assert exc.reason.replace("_", "").isalnum()
        return
    assert isinstance(f, RequestFeatures)
    assert f.text_bytes >= 0 and f.n_sequences >= 1 and f.n_images >= 0
    assert f.max_output_tokens is None or 0 <= f.max_output_tokens < 2**31


@FUZZ
@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_sse_reader_never_raises_on_arbitrary_bytes(data: bytes, cuts: list[int]) -> None:
    r = SSEUsageReader(max_event_bytes=64)
    prev = 0
    for c in sorted(min(c, len(data)) for c in cuts):
        r.feed(data[prev:c])
        prev = c
    r.feed(data[prev:])
    r.close()
    assert r.prompt_tokens is None or r.prompt_tokens > 0


sse_event = st.one_of(
    st.builds(lambda t: {"choices": [{"delta": {"content": t}}], "usage": None}, st.text(max_size=20)),
    st.builds(lambda n: {"choices": [], "usage": {"prompt_tokens": n}}, st.integers(1, 10**6)),
)


@FUZZ
@given(
    events=st.lists(sse_event, min_size=1, max_size=8),
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    space=st.booleans(),
    comments=st.booleans(),
    done=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_sse_usage_is_independent_of_chunking_and_framing(
    events: list[dict[str, object]], eol: bytes, space: bool, comments: bool, done: bool, seed: int
) -> None:
    prefix = b"data: " if space else b"data:"
    stream = b""
    want = None
    for e in events:
        if comments:
            stream += b": ping" + eol + b"event: chunk" + eol
        stream += prefix + json.dumps(e, ensure_ascii=False).encode() + eol + eol
        usage = e.get("usage")
        if isinstance(usage, dict):
            want = usage["prompt_tokens"]
    if done:
        stream += prefix + b"[DONE]" + eol + eol
    rng = random.Random(seed)
    cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(0, 8)))
    r = SSEUsageReader()
    prev = 0
    for c in [*cuts, len(stream)]:
        r.feed(stream[prev:c])
        prev = c
    r.close()
    assert r.prompt_tokens == want


@FUZZ
@given(encoding=st.text(max_size=20), chunks=st.lists(st.binary(max_size=64), max_size=4))
def test_decoders_raise_only_decode_error(encoding: str, chunks: list[bytes]) -> None:
    dec = make_decoder(encoding, max_output_bytes=1 << 16)
    if dec is None:
        return
    try:
        for c in chunks:
            dec.decode(c)
    except DecodeError:
        pass


# -- scripted ext_proc message sequences --------------------------------------------------------

METRICS = RouterMetrics()
ROUTER = Runtime(parse_config(CONFIG), observer=PrometheusObserver(METRICS))

header_key = st.one_of(
    st.sampled_from(
        [":method", ":path", ":status", "content-type", "content-encoding", "x-request-id", "x-tbr-pool"]
    ),
    st.text(max_size=12),
)
header_val = st.one_of(
    st.sampled_from(
        [
            "POST",
            "GET",
            "/v1/chat/completions",
            "/v1/completions",
            "200",
            "404",
            "text/event-stream",
            "application/json",
            "gzip",
            "br, gzip",
            "identity",
        ]
    ),
    st.binary(max_size=24),
)


@st.composite
def header_map(draw: st.DrawFn) -> pb.HttpHeaders:
    hs = []
    for k, v in draw(st.lists(st.tuples(header_key, header_val), max_size=6)):
        if isinstance(v, bytes) and draw(st.booleans()):
            hs.append(core.HeaderValue(key=k, raw_value=v))
        else:
            text = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
            hs.append(
                core.HeaderValue(key=k, value=text)
                if draw(st.booleans())
                else core.HeaderValue(key=k, raw_value=text.encode())
            )
    return pb.HttpHeaders(headers=core.HeaderMap(headers=hs), end_of_stream=draw(st.booleans()))


body_bytes = st.one_of(
    encoded_request,
    st.binary(max_size=120),
    st.sampled_from(
        [
            b'data: {"usage":{"prompt_tokens":7}}\n\n',
            b"data: [DONE]\n\n",
            b'{"usage":{"prompt_tokens":9}}',
            b"\x1f\x8b\x08\x00",
        ]
    ),
)

processing_request = st.one_of(
    header_map().map(lambda h: pb.ProcessingRequest(request_headers=h)),
    st.builds(
        lambda b, e: pb.ProcessingRequest(request_body=pb.HttpBody(body=b, end_of_stream=e)),
        body_bytes,
        st.booleans(),
    ),
    header_map().map(lambda h: pb.ProcessingRequest(response_headers=h)),
    st.builds(
        lambda b, e: pb.ProcessingRequest(response_body=pb.HttpBody(body=b, end_of_stream=e)),
        body_bytes,
        st.booleans(),
    ),
    st.just(pb.ProcessingRequest(request_trailers=pb.HttpTrailers())),
    st.just(pb.ProcessingRequest(response_trailers=pb.HttpTrailers())),
    st.just(pb.ProcessingRequest()),  # no phase set at all
)


def _envoy_order(draw: st.DrawFn) -> list[pb.ProcessingRequest]:
    """A sequence in the order Envoy sends phases, with fuzzed contents."""
    seq = [pb.ProcessingRequest(request_headers=draw(header_map()))]
    seq.append(pb.ProcessingRequest(request_body=pb.HttpBody(body=draw(body_bytes), end_of_stream=True)))
    seq.append(pb.ProcessingRequest(response_headers=draw(header_map())))
    for _ in range(draw(st.integers(0, 4))):
        seq.append(
            pb.ProcessingRequest(
                response_body=pb.HttpBody(body=draw(body_bytes), end_of_stream=draw(st.booleans()))
            )
        )
    if draw(st.booleans()):
        seq.append(pb.ProcessingRequest(response_trailers=pb.HttpTrailers()))
    return seq


sequences = st.one_of(st.lists(processing_request, max_size=10), st.composite(_envoy_order)())


@FUZZ_HEAVY
@given(seq=sequences, end=st.sampled_from(STREAM_ENDS))
def test_processor_never_raises_and_answers_the_phase_sent(
    seq: list[pb.ProcessingRequest], end: StreamEnd
) -> None:
    def errs() -> float:
        return sum(
            s.value for fam in METRICS.errors.collect() for s in fam.samples if s.name.endswith("_total")
        )

    before = errs()
    proc = StreamProcessor(ROUTER, rng=random.Random(0))
    for req in seq:
        resp = proc.handle(req)
        phase = req.WhichOneof("request")
        assert resp.WhichOneof("response") == (phase or "request_headers")
        for opt in (
            resp.request_headers.response.header_mutation.set_headers,
            resp.request_body.response.header_mutation.set_headers,
        ):
            for o in opt:
                assert (
                    o.header.key == o.header.key.lower()
                    and b"\r" not in o.header.raw_value
                    and b"\n" not in o.header.raw_value
                )
    proc.finish(end)
    assert errs() == before, "a phase handler raised (caught by the safety net)"
