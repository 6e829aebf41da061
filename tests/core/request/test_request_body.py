"""Parsing OpenAI bodies into the features the budget needs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extproc.core.request.endpoints import endpoint_for_path
from extproc.core.request.request_body import _RARE_FIELDS, UnreadableRequest, features_of, parse_request_body


def _chat(messages: list[dict[str, object]], **extra: object) -> bytes:
    return json.dumps({"model": "m", "messages": messages, **extra}).encode()


def test_counts_decoded_utf8_not_escaped_json() -> None:
    text = "你好，世界" * 10  # 50 chars, 3 bytes each
    body = _chat([{"role": "user", "content": text}])  # json.dumps escapes to \uXXXX (6 bytes/char)
    f = parse_request_body(body, "chat")
    assert f.text_bytes == len(text.encode("utf-8")) == 150
    assert len(body) > 300


def test_output_reserve_prefers_max_completion_tokens_and_counts_n() -> None:
    f = parse_request_body(
        _chat([{"role": "user", "content": "hi"}], max_tokens=10, max_completion_tokens=20, n=3), "chat"
    )
    assert f.max_output_tokens == 20
    assert f.n_sequences == 3
    f = parse_request_body(_chat([{"role": "user", "content": "hi"}], max_tokens=7), "chat")
    assert f.max_output_tokens == 7
    f = parse_request_body(_chat([{"role": "user", "content": "hi"}]), "chat")
    assert f.max_output_tokens is None


@pytest.mark.parametrize(
    ("prompt", "exact", "text_bytes"),
    [
        pytest.param("abc", 0, 3, id="string"),
        pytest.param(["ab", "cde"], 0, 3, id="list-of-strings-longest"),  # each served alone (issue 34)
        pytest.param([1, 2, 3, 4], 4, 0, id="token-ids"),
        pytest.param([[1, 2], [3, 4, 5]], 3, 0, id="batch-of-token-ids-longest"),
    ],
)
def test_completions_prompt_shapes(prompt: object, exact: int, text_bytes: int) -> None:
    f = parse_request_body(json.dumps({"model": "m", "prompt": prompt}).encode(), "completions")
    assert f.exact_prompt_tokens == exact
    assert f.text_bytes == text_bytes


def test_parts_tools_and_images_are_separate() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = _chat(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 5000}},
                ],
            },
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"x":1}'}}]},
        ],
        tools=tools,
    )
    f = parse_request_body(body, "chat")
    assert f.n_images == 1
    assert f.n_tools == 1
    assert f.tool_schema_bytes > 0
    # arguments are measured as the template prints them: parsed, then JSON with ", "/": " separators
    assert f.text_bytes == len("look") + len("f") + len('{"x": 1}')


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(b"", "body_empty", id="empty"),
        pytest.param(b"{not json", "body_not_json", id="not-json"),
        pytest.param(b'{"messages": [', "body_not_json", id="truncated"),
        pytest.param(b"[1, 2]", "body_not_object", id="array"),
        pytest.param(b'{"messages": "hi"}', "bad_field_type", id="messages-string"),
        pytest.param(b'{"messages": []}', "empty_prompt", id="messages-empty"),
        pytest.param(b'{"messages": [{"content": "x"}], "max_tokens": -1}', "bad_field_value", id="negative"),
        pytest.param(
            b'{"messages": [{"content": "x"}], "max_tokens": "9"}', "bad_field_type", id="string-max"
        ),
        pytest.param(
            b'{"messages": [{"content": "x"}], "max_tokens": 1.5}', "bad_field_type", id="float-max"
        ),
        pytest.param(b'{"messages": [{"content": "\xff"}]}', "body_not_utf8", id="not-utf8"),
    ],
)
def test_unreadable_bodies_have_reasons(body: bytes, reason: str) -> None:
    with pytest.raises(UnreadableRequest) as exc:
        parse_request_body(body, "chat")
    assert exc.value.reason == reason


def test_endpoint_for_path() -> None:
    assert endpoint_for_path("/v1/chat/completions?x=1") == "chat"
    assert endpoint_for_path("/v1/completions/") == "completions"
    assert endpoint_for_path("/v1/embeddings") is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3000, 3000), (3000.0, 3000), (-1, None), (0, None), (None, None)],
    ids=["n", "integral_float", "minus_one_is_the_pools_own_limit", "zero", "absent"],
)
def test_truncate_prompt_tokens_is_read_as_vllm_applies_it(value: object, expected: int | None) -> None:
    """vLLM: N ≥ 1 keeps the last N tokens; -1 the serving pool's max_model_len (no bound the
    router can use); 0 and absent: no truncation (issue 34, item 5)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "truncate_prompt_tokens": value}
    assert parse_request_body(json.dumps(body).encode(), "chat").truncate_prompt_tokens == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [("3000", "bad_field_type"), (True, "bad_field_type"), (1.5, "bad_field_type"), (-2, "bad_field_value")],
)
def test_bad_truncate_prompt_tokens_is_unreadable(value: object, reason: str) -> None:
    body = {"model": "m", "prompt": "hi", "truncate_prompt_tokens": value}
    with pytest.raises(UnreadableRequest) as exc:
        parse_request_body(json.dumps(body).encode(), "completions")
    assert exc.value.reason == reason


def test_completions_text_list_is_its_longest_member_carrying_each() -> None:
    prompts = ["short one", "a much longer prompt than the others " * 5, "mid length prompt"]
    f = parse_request_body(json.dumps({"model": "m", "prompt": prompts, "n": 2}).encode(), "completions")
    assert f.text_bytes == len(prompts[1].encode())
    assert [c.text_bytes for c in f.conversations] == [len(p.encode()) for p in prompts]
    assert f.n_sequences == 2 and all(c.n_sequences == 2 for c in f.conversations)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.dictionaries(st.sampled_from(["type", "function", "name"]), st.text(max_size=6)), max_size=2),
    st.dictionaries(
        st.sampled_from(["enable_thinking", "thinking", "effort", "type", "include_usage"]),
        st.booleans() | st.text(max_size=6),
    ),
)
_COMMON = ("max_tokens", "max_completion_tokens", "stream", "stream_options", "temperature", "user")


def _outcome(parsed: dict[str, object]) -> object:
    try:
        f = features_of(parsed, "chat")
    except UnreadableRequest as exc:
        return ("unreadable", str(exc))
    return f


@settings(max_examples=300, deadline=None)
@given(
    common=st.dictionaries(st.sampled_from(_COMMON), _VALUES, max_size=4),
    rare=st.dictionaries(st.sampled_from(sorted(_RARE_FIELDS)), _VALUES, max_size=3),
    content=st.text(max_size=40),
)
def test_skipping_the_rare_fields_readers_changes_nothing(
    common: dict[str, object], rare: dict[str, object], content: str
) -> None:
    """A body without any rare field is read as the readers would read it (``n: null`` is absent to
    them but makes the parse run them); with rare fields, the first bad field is the one reported
    whatever the fast path (the readers run in the order they always ran in)."""
    body: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": content}], **common}
    assert _outcome(body) == _outcome({**body, "n": None})
    with_rare = {**body, **rare}
    assert _outcome(with_rare) == _outcome({**with_rare, "n": rare.get("n")})


def test_a_bad_rare_field_is_reported_before_a_bad_output_maximum() -> None:
    with pytest.raises(UnreadableRequest, match="tools"):
        features_of(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": 3, "max_tokens": "a"},
            "chat",
        )
