"""Micro-benchmark: serialize+parse of ext_proc messages with the xds-protos stubs (protobuf upb).

Run: ``.venv/bin/python benchmarks/protobuf_stubs.py``. Prints µs per operation (best of 3 × 100,000).
Recorded in docs/design/001-protobuf-stubs.md; the same three operations as docs/envoy-facts.md §2.
"""

import json
import timeit

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from google.protobuf.internal import api_implementation

print("protobuf backend:", api_implementation.Type())
body = json.dumps(
    {"model": "m", "messages": [{"role": "user", "content": "lorem ipsum dolor sit amet " * 74}]}
).encode()
req = ep.ProcessingRequest(request_body=ep.HttpBody(body=body, end_of_stream=True))
wire = req.SerializeToString()
print("wire bytes", len(wire))


def ser_parse():
    ep.ProcessingRequest.FromString(req.SerializeToString())


hdrs = ep.ProcessingRequest(
    request_headers=ep.HttpHeaders(
        headers=base_pb2.HeaderMap(
            headers=[base_pb2.HeaderValue(key=f"x-h{i}", raw_value=b"v" * 16) for i in range(10)]
        )
    )
)


def ser_parse_h():
    ep.ProcessingRequest.FromString(hdrs.SerializeToString())


def build_resp():
    ep.ProcessingResponse(
        request_body=ep.BodyResponse(
            response=ep.CommonResponse(
                header_mutation=ep.HeaderMutation(
                    set_headers=[
                        base_pb2.HeaderValueOption(
                            header=base_pb2.HeaderValue(key="x-tbr-pool", raw_value=b"short"),
                            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
                        )
                    ]
                ),
                clear_route_cache=True,
            )
        )
    ).SerializeToString()


for name, fn in (
    ("2KB body ser+parse", ser_parse),
    ("10-header ser+parse", ser_parse_h),
    ("build+serialize response", build_resp),
):
    n = 100_000
    best = min(timeit.repeat(fn, number=n, repeat=3))
    print(f"{name}: {best / n * 1e6:.2f} us/op ({n} iters, best of 3)")
