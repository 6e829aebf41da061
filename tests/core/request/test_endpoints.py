"""The endpoint table: each budgeted path has one row whose parser reads its body and whose usage
shape reads its answer; nothing else switches on the endpoint."""

from __future__ import annotations

import json

import pytest

from extproc.core.learn.usage_reader import UsageReader
from extproc.core.request.endpoints import (
    ENDPOINTS,
    Endpoint,
    EndpointSpec,
    endpoint_for_path,
    parse_body,
    spec_for_path,
    spec_of,
)
from extproc.core.request.request_body import UnreadableRequest

BODIES = {
    Endpoint.CHAT: {"model": "m", "messages": [{"role": "user", "content": "hello there"}]},
    Endpoint.COMPLETIONS: {"model": "m", "prompt": "hello there"},
    Endpoint.RESPONSES: {"model": "m", "input": "hello there"},
    Endpoint.MESSAGES: {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hello there"}],
    },
    Endpoint.CHAT_BATCH: {"model": "m", "messages": [[{"role": "user", "content": "hello there"}]]},
}
"""A minimal body of each endpoint, as its API documents it."""

ANSWERS = {
    "openai": {
        "choices": [{"finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
    },
    "responses": {"id": "resp_1", "status": "completed", "usage": {"input_tokens": 11, "output_tokens": 3}},
    "anthropic": {"stop_reason": "end_turn", "usage": {"input_tokens": 11, "output_tokens": 3}},
}
"""A JSON answer of each usage shape."""


def test_every_endpoint_has_one_row_and_every_row_a_distinct_path() -> None:
    assert sorted(s.endpoint for s in ENDPOINTS) == sorted(Endpoint)
    assert len({s.path for s in ENDPOINTS}) == len(ENDPOINTS)


@pytest.mark.parametrize("spec", ENDPOINTS, ids=lambda s: s.endpoint.value)
def test_each_row_parses_its_body_and_reads_its_answer(spec: EndpointSpec) -> None:
    assert spec_for_path(spec.path + "/?stream=1") is spec and spec_of(spec.endpoint.value) is spec
    features = parse_body(json.dumps(BODIES[spec.endpoint]).encode(), spec)
    assert features.endpoint == spec.endpoint and features.text_bytes > 0
    reader = UsageReader.for_answer(spec, "application/json", "")
    assert isinstance(reader, UsageReader)
    reader.feed(json.dumps(ANSWERS[spec.usage_shape]).encode())
    usage = reader.close()
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (11, 3)
    assert (usage.response_id == "resp_1") is (spec.usage_shape == "responses")


def test_paths_methods_and_labels_outside_the_table() -> None:
    assert endpoint_for_path("/v1/embeddings") is None and spec_of("embeddings") is None
    assert endpoint_for_path("/v1/chat/completions?x=1") == "chat"
    with pytest.raises(UnreadableRequest) as exc:
        parse_body(b'{"model": "m", "input": "x"}', "embeddings")
    assert exc.value.reason == "unsupported_path" and exc.value.model == "m"


def test_only_the_responses_api_is_always_read_and_only_the_batch_sums_conversations() -> None:
    assert [s.endpoint for s in ENDPOINTS if s.always_read] == [Endpoint.RESPONSES]
    assert [s.endpoint for s in ENDPOINTS if s.sums_conversations] == [Endpoint.CHAT_BATCH]
