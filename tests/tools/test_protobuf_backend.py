"""docs/design/001-protobuf-stubs.md: the ext_proc stubs come from xds-protos and run on protobuf's upb backend."""

from __future__ import annotations

from envoy.service.ext_proc.v3 import external_processor_pb2, external_processor_pb2_grpc
from google.protobuf.internal import api_implementation


def test_protobuf_runs_on_upb() -> None:
    # The pure-Python fallback is 20-100x slower on ext_proc messages (design 001).
    assert api_implementation.Type() == "upb"


def test_xds_protos_provides_the_grpcio_servicer() -> None:
    assert hasattr(external_processor_pb2_grpc, "add_ExternalProcessorServicer_to_server")
    body = external_processor_pb2.ProcessingRequest(
        request_body=external_processor_pb2.HttpBody(body=b"{}" * 1000, end_of_stream=True)
    )
    again = external_processor_pb2.ProcessingRequest.FromString(body.SerializeToString())
    assert again.request_body.body == b"{}" * 1000 and again.request_body.end_of_stream
