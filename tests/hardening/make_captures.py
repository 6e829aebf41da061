"""Regenerate ``tests/hardening/captures/``: SSE streams recorded from the stand-in vLLM pool
(mockpool, real HTTP over loopback) plus OpenAI-format variants (CRLF, comments, ``event:``
lines, ``data:`` without a space, cumulative usage, no ``[DONE]``). All bytes are our own.

Run: ``python -m tests.hardening.make_captures``. Each capture ``NAME.sse`` has ``NAME.json``
next to it holding the ``usage.prompt_tokens`` the stream reports (what a reader must find).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from mockpool.server import PoolThread
from mockpool.settings import PoolSettings

DIR = Path(__file__).parent / "captures"

PROMPTS = {
    "latin": "Summarise the following paragraph in one sentence: the quick brown fox jumps over the lazy dog.",
    "cjk": "请用一句话总结：敏捷的棕色狐狸跳过了懒狗。日本語のテキストも少し。한국어 문장도.",
    "emoji": "Explain these: 🦊🐶🏃‍♂️ and ñ, ü, ß, € — with accents éèê.",
}


def _record(base_url: str, prompt: str, *, include_usage: bool, model: str) -> bytes:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": include_usage},
    }
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=30.0) as r:
        r.raise_for_status()
        return b"".join(r.iter_raw())


def _write(name: str, data: bytes, prompt_tokens: int | None) -> None:
    (DIR / f"{name}.sse").write_bytes(data)
    (DIR / f"{name}.json").write_text(json.dumps({"prompt_tokens": prompt_tokens}) + "\n")


def _usage_of(data: bytes) -> int | None:
    found = None
    for line in data.splitlines():
        if line.startswith(b"data: {"):
            usage = json.loads(line[6:]).get("usage")
            if usage:
                found = usage["prompt_tokens"]
    return found


def _variants(name: str, data: bytes, tokens: int | None) -> None:
    events = [e for e in data.split(b"\n\n") if e]
    # CRLF line endings, a comment and an id/event line on every event, a retry field
    crlf = b"".join(
        b": keep-alive\r\nevent: message\r\nid: %d\r\n" % i + e + b"\r\n\r\n" for i, e in enumerate(events)
    )
    _write(f"{name}_crlf_comments", b"retry: 1000\r\n\r\n" + crlf, tokens)
    # data: without a space, bare CR line endings
    nospace = b"".join(e.replace(b"data: ", b"data:") + b"\r\r" for e in events)
    _write(f"{name}_nospace_cr", nospace, tokens)
    # no [DONE]; the usage event is the last, without its terminating blank line
    no_done = b"\n\n".join(e for e in events if e != b"data: [DONE]")
    _write(f"{name}_no_done_no_final_blank", no_done, tokens)
    # [DONE] glued to the usage event in one write, preceded by a UTF-8 BOM
    _write(f"{name}_bom", b"\xef\xbb\xbf" + data, tokens)


def main() -> None:
    DIR.mkdir(exist_ok=True)
    settings = PoolSettings(name="capture", max_model_len=32768)
    with PoolThread(settings) as pool:
        for key, prompt in PROMPTS.items():
            data = _record(pool.base_url, prompt, include_usage=True, model=settings.model_names[0])
            tokens = _usage_of(data)
            assert tokens, "the stand-in pool reports usage when include_usage is true"
            _write(f"mockpool_{key}", data, tokens)
            _variants(f"mockpool_{key}", data, tokens)
        data = _record(pool.base_url, PROMPTS["latin"], include_usage=False, model=settings.model_names[0])
        _write("mockpool_no_usage", data, None)
    # OpenAI style: usage null in every chunk, then a usage-only final chunk
    chunks = [
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": t}}],
            "usage": None,
        }
        for t in ["Bon", "jour", " ✓"]
    ]
    final = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 321, "completion_tokens": 3, "total_tokens": 324},
    }
    data = b"".join(
        b"data: " + json.dumps(c, ensure_ascii=False).encode() + b"\n\n" for c in [*chunks, final]
    )
    _write("openai_usage_null_then_final", data + b"data: [DONE]\n\n", 321)
    # cumulative usage in every chunk (some servers): the last one is the answer
    cum = [
        {
            "choices": [{"index": 0, "delta": {"content": "x"}}],
            "usage": {"prompt_tokens": 77, "completion_tokens": i},
        }
        for i in range(1, 6)
    ]
    data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in cum)
    _write("cumulative_usage_every_chunk", data + b"data: [DONE]\n\n", 77)
    # multi-line data event (JSON split over two data: lines) and an error event before it
    multi = b'event: error\ndata: {"error": "transient"}\n\ndata: {"choices": [],\ndata:  "usage": {"prompt_tokens": 55}}\n\ndata: [DONE]\n\n'
    _write("multiline_data", multi, 55)


if __name__ == "__main__":
    main()
