"""Responses, Anthropic Messages and chat batch bodies reduce to the same features as chat."""

from __future__ import annotations

import base64
import io

import orjson
import pytest
from PIL import Image

from extproc.core.request.endpoints import endpoint_for_path, parse_body
from extproc.core.request.images import ImageSize
from extproc.core.request.request_body import UnreadableRequest


def body(obj: object) -> bytes:
    return orjson.dumps(obj)


def png_b64(w: int, h: int) -> str:
    buf = io.BytesIO()
    Image.new("L", (w, h)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [
        ("/v1/responses", "responses"),
        ("/v1/messages?beta=true", "messages"),
        ("/v1/chat/completions/batch", "chat_batch"),
        ("/v1/chat/completions/", "chat"),
        ("/v1/responses/resp_1", None),
    ],
)
def test_paths(path: str, endpoint: str | None) -> None:
    assert endpoint_for_path(path) == endpoint


def test_responses_string_and_items_match_chat_text() -> None:
    chat = parse_body(body({"model": "m", "messages": [{"role": "user", "content": "héllo"}]}), "chat")
    s = parse_body(body({"model": "m", "input": "héllo", "max_output_tokens": 7}), "responses")
    items = parse_body(
        body(
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "héllo"}]}]}
        ),
        "responses",
    )
    assert s.text_bytes == items.text_bytes == chat.text_bytes == 6
    assert (s.n_messages, s.max_output_tokens, s.endpoint) == (1, 7, "responses")


def test_responses_instructions_tools_calls_previous() -> None:
    f = parse_body(
        body(
            {
                "model": "m",
                "instructions": "abc",
                "previous_response_id": "resp_1",
                "tools": [{"type": "function", "name": "f", "parameters": {}}],
                "input": [
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c", "output": "12345"},
                ],
            }
        ),
        "responses",
    )
    assert f.text_bytes == 3 + 1 + 2 + 5
    assert (f.n_messages, f.n_tools, f.previous_response_id) == (3, 1, "resp_1")
    assert f.tool_schema_bytes > 0


def test_responses_without_input_is_unreadable_unless_it_continues() -> None:
    with pytest.raises(UnreadableRequest) as err:
        parse_body(body({"model": "m"}), "responses")
    assert err.value.reason == "empty_prompt" and err.value.model == "m"


def test_anthropic_blocks() -> None:
    f = parse_body(
        body(
            {
                "model": "claude",
                "max_tokens": 100,
                "system": [{"type": "text", "text": "sys"}],
                "tools": [{"name": "t", "input_schema": {}}],
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "1", "name": "t", "input": {"a": 1}}],
                    },
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "1",
                                "content": [{"type": "text", "text": "ok"}],
                            },
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": png_b64(640, 480),
                                },
                            },
                        ],
                    },
                ],
            }
        ),
        "messages",
    )
    tool_input = '{"a": 1}'  # as vLLM's json.dumps prints it (spaced separators)
    assert f.text_bytes == len("sys") + len("hi") + len("t") + len(tool_input) + len("ok")
    assert f.n_messages == 1 + 3 + 1  # system, three turns, the tool message
    assert (f.max_output_tokens, f.n_tools, f.n_images) == (100, 1, 1)
    assert f.image_sizes == (ImageSize(640, 480),)


def test_anthropic_unknown_block_is_unreadable_with_model() -> None:
    with pytest.raises(UnreadableRequest) as err:
        parse_body(
            body({"model": "x", "messages": [{"role": "user", "content": [{"type": "?"}]}]}), "messages"
        )
    assert (err.value.reason, err.value.model) == ("unknown_content_part", "x")


def test_batch_keeps_each_conversation_and_describes_the_longest() -> None:
    f = parse_body(
        body(
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b" * 50}]],
            }
        ),
        "chat_batch",
    )
    assert [c.text_bytes for c in f.conversations] == [1, 50]
    assert f.text_bytes == 50 and f.max_output_tokens == 5


def test_batch_longest_conversation_is_estimated_like_the_same_chat_request() -> None:
    """A chat batch body is budgeted with the run model, like each of its conversations sent as chat
    (the batch features once dropped runs, tool and reasoning runs, tool calls and unknown fields)."""
    from dataclasses import fields

    from extproc.config import CalibrationConfig, EstimatorConfig
    from extproc.core.estimate.calibration import InMemoryRatioStore
    from extproc.core.estimate.estimator import Estimator
    from extproc.core.request.request_body import parse_request_body

    agent = [
        {"role": "system", "content": "You are a terse assistant. Use the tools when needed."},
        {"role": "user", "content": "Wie spät ist es in Tōkyō? Antworte auf Deutsch."},
        {
            "role": "assistant",
            "content": "",
            "reasoning": "The user asks for the time in Tokyo; call the clock tool with the IANA zone. " * 20,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "clock", "arguments": '{"tz": "Asia/Tokyo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"time": "2026-12-01T12:00:00+09:00"}'},
        {"role": "user", "content": "Und in Zürich?", "x_client_tag": "beta"},
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "clock",
                "description": "Current time in a time zone",
                "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
            },
        }
    ]
    short = [{"role": "user", "content": "Hi"}]
    model = "Qwen/Qwen3-8B"
    batch = parse_body(
        body({"model": model, "max_tokens": 64, "tools": tools, "messages": [short, agent]}), "chat_batch"
    )
    chat = parse_request_body(
        body({"model": model, "max_tokens": 64, "tools": tools, "messages": agent}), "chat"
    )
    assert batch.runs is not None and batch.reasoning_runs is not None and batch.tools_runs is not None
    assert (batch.n_tool_calls, batch.unknown_fields) == (chat.n_tool_calls, chat.unknown_fields) != (0, 0)
    assert batch.conversations[1].reasoning_runs is not None
    counted = ("runs", "reasoning_runs", "tools_runs")
    same = [f.name for f in fields(chat) if f.name not in ("endpoint", "conversations", "_counted", *counted)]
    assert [getattr(batch, n) for n in same] == [getattr(chat, n) for n in same]
    assert chat.runs is not None and chat.reasoning_runs is not None and chat.tools_runs is not None
    assert batch.runs.as_dict() == chat.runs.as_dict()
    assert batch.reasoning_runs.as_dict() == chat.reasoning_runs.as_dict()
    assert [r.as_dict() for r in batch.tools_runs] == [r.as_dict() for r in chat.tools_runs]

    cal = CalibrationConfig()
    est = Estimator(estimator=EstimatorConfig(), calibration=cal, store=InMemoryRatioStore.from_config(cal))
    whole, alone = est.estimate(batch), est.estimate(chat)
    assert whole.model_tokens > 0.0  # the run model, not the bytes/token fallback
    assert (whole.prompt_tokens, whole.key) == (alone.prompt_tokens, alone.key)
    assert est.estimate(batch.conversations[1]).prompt_tokens == alone.prompt_tokens
