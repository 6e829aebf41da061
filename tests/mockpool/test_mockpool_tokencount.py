"""Token counting against independent references: Meta's tiktoken Llama-3 tokenizer, hand-built Qwen3 prompts,
and (when ../shared/data is present) the derived per-request oracle counts of docs/data.md §2.2."""

from __future__ import annotations

import json

import pytest
import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tokenizers import Tokenizer

from mockpool.settings import OUTPUT_PIECES
from mockpool.templates import ChatInputError
from mockpool.tokencount import load_counter, tokenizer_dir

# Meta's pre-tokenisation regex for Llama 3 (meta-llama/llama-models, models/llama3/tokenizer.py).
LLAMA3_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3_SPECIALS = {"<|begin_of_text|>": 128000, "<|start_header_id|>": 128006, "<|end_header_id|>": 128007}
LLAMA3_SPECIALS["<|eot_id|>"] = 128009
SAMPLES = [
    "The quick brown fox jumps over the lazy dog. 1234567 tokens!",
    "анализ качества развития позволяет принимать решения",
    "高音单簧管和高音萨克斯的调性相同吗？",
    "def f(x):\n    return {'a': [1, 2, 3]}\n\n\n",
    "  leading and trailing spaces   ",
    "Émoji 🙂 and ümlauts — dash",
]


@pytest.fixture(scope="module")
def meta_llama3() -> tiktoken.Encoding:
    """Meta's reference Llama-3 tokenizer: tiktoken over the wheel's tokenizer.model (not the HF json)."""
    ranks = load_tiktoken_bpe(str(tokenizer_dir("llama3") / "tokenizer.model"))
    return tiktoken.Encoding(
        "llama3-meta", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=LLAMA3_SPECIALS
    )


@pytest.mark.parametrize("family", ["qwen3", "llama3"])
def test_output_pieces_are_one_token_each(family: str) -> None:
    counter = load_counter(family)
    assert [counter.count_text(p) for p in OUTPUT_PIECES] == [1] * len(OUTPUT_PIECES)
    text = "".join(OUTPUT_PIECES * 5)
    assert counter.count_text(text) == 5 * len(OUTPUT_PIECES)


@pytest.mark.parametrize("text", SAMPLES)
def test_llama3_matches_meta_reference(meta_llama3: tiktoken.Encoding, text: str) -> None:
    counter = load_counter("llama3")
    assert counter.encode(text) == meta_llama3.encode_ordinary(text)


def test_llama3_ignore_merges_patch_is_needed(meta_llama3: tiktoken.Encoding) -> None:
    """Without the in-memory patch the wheel's tokenizer.json over-counts Cyrillic words."""
    text = " анализ качества развития"
    unpatched = Tokenizer.from_file(str(tokenizer_dir("llama3") / "tokenizer.json"))
    reference = len(meta_llama3.encode_ordinary(text))
    assert len(unpatched.encode(text, add_special_tokens=False).ids) > reference
    assert load_counter("llama3").count_text(text) == reference


def test_llama3_chat_count_is_canonical_format(meta_llama3: tiktoken.Encoding) -> None:
    messages = [
        {"role": "system", "content": "  You are terse.  "},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "анализ"}]},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye\n"},
    ]
    expected = (
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi\nанализ<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    counter = load_counter("llama3")
    text, media = counter.render_chat(messages)
    assert (text, media) == (expected, 0)
    reference = len(meta_llama3.encode(expected, allowed_special="all"))
    assert counter.count_chat(messages).prompt_tokens == reference


def test_llama3_completion_prompt_gets_bos() -> None:
    counter = load_counter("llama3")
    assert counter.encode("hi", add_special_tokens=True)[0] == 128000
    assert counter.count_text("hi", add_special_tokens=True) == counter.count_text("hi") + 1


def test_qwen3_template_renders_official_format() -> None:
    counter = load_counter("qwen3")
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHi!"},
        {"role": "user", "content": "Again"},
    ]
    text, _ = counter.render_chat(messages)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi!<|im_end|>\n"  # reasoning of earlier turns is dropped by the template
        "<|im_start|>user\nAgain<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # <|im_start|> user \n Hello <|im_end|> \n <|im_start|> assistant \n
    assert counter.count_chat([{"role": "user", "content": "Hello"}]).prompt_tokens == 9
    thinking_off, _ = counter.render_chat(messages[:2], template_kwargs={"enable_thinking": False})
    assert thinking_off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_tools_and_tool_calls() -> None:
    counter = load_counter("qwen3")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    text, _ = counter.render_chat(messages, tools)
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert json.dumps(tools[0], ensure_ascii=False) in text  # transformers' tojson
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text
    with_tools = counter.count_chat(messages, tools).prompt_tokens
    assert with_tools > counter.count_chat(messages).prompt_tokens + 50  # ~100 tokens of tool boilerplate


def test_media_parts_count_fixed_tokens() -> None:
    counter = load_counter("qwen3")
    plain = counter.count_chat([{"role": "user", "content": "What is this?"}])
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with_image = counter.count_chat(
        [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}], image_tokens=256
    )
    assert with_image.media_parts == 1
    assert with_image.prompt_tokens == plain.prompt_tokens + 256


@pytest.mark.parametrize(
    "messages",
    [
        [],
        "hi",
        [{"content": "no role"}],
        [{"role": "user", "content": [{"type": "weird"}]}],
        [{"role": "user", "content": 3}],
    ],
)
def test_bad_messages_raise(messages: object) -> None:
    with pytest.raises(ChatInputError):
        load_counter("qwen3").count_chat(messages)
