"""Rebuild the broad estimator corpus: OpenAI request bodies from public text in many scripts and formats.

The corpus itself is not in the repository (its sources have their own licences); this module rebuilds it
deterministically from pinned commits of public repositories (read with ``git show COMMIT:PATH`` from local
mirrors) plus seeded synthetic data (base64, hex dumps, UUIDs, CSV, SQL, logs, emoji chat, agent turns).
``tbr eval-estimator --corpus FILE.jsonl`` reads the result.

Sources (licence):

* tldr-pages/tldr @ 08e345f (CC-BY-4.0): command pages in 40 languages (prose + Markdown + shell).
* jlevy/the-art-of-command-line @ 6b50745 (CC-BY-SA-4.0): one long README in 18 languages.
* code-charity/youtube @ 9353b06 (AGPL-3.0): UI strings in 60+ locales (Hebrew, Urdu, Gujarati, Marathi,
  Vietnamese, Telugu, Kannada, Amharic...), used as JSON and as joined prose; its JavaScript and CSS.
* TheAlgorithms/Rust @ 2c53ddf, TheAlgorithms/Go @ 5ba447e (MIT): source files.

Every line is one request body with ``metadata.kind`` (the content kind, see ``CONTENT_KINDS`` in
:mod:`extproc.core.text.runs`) and ``metadata.source``. Usage::

    python -m evaluation.broad_corpus --mirrors /work/.mirror --out /tmp/broad.jsonl
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["build", "main"]

PINNED: dict[str, str] = {
    "tldr-pages+tldr": "08e345f42639f67d99282813247ac670dc6e87cb",
    "jlevy+the-art-of-command-line": "6b50745d2e788add2e8f1ed29010e72659a9a074",
    "code-charity+youtube": "9353b0603b98ebf08133f43c0c1c45cc912a1797",
    "TheAlgorithms+Rust": "2c53ddfa4b43da4df34bc2f990c5e806f455cb90",
    "TheAlgorithms+Go": "5ba447ec5ff3d1213de65b92e726ee74c5d5cc19",
}

# ISO code -> content kind (script) of the prose
_TLDR_LANGS = {
    "ar": "arabic", "bg": "cyrillic", "bn": "bengali", "bs": "latin_other", "ca": "latin_other",
    "cs": "latin_other", "da": "latin_other", "de": "latin_other", "el": "greek", "es": "latin_other",
    "fa": "arabic", "fi": "latin_other", "fr": "latin_other", "hi": "devanagari", "id": "latin_other",
    "it": "latin_other", "ja": "japanese", "ko": "hangul", "lo": "other_script", "ml": "malayalam",
    "ne": "devanagari", "nl": "latin_other", "pl": "latin_other", "pt_BR": "latin_other",
    "ro": "latin_other", "ru": "cyrillic", "sr": "cyrillic", "sv": "latin_other", "ta": "tamil",
    "th": "thai", "tr": "latin_other", "uk": "cyrillic", "uz": "latin_other", "zh": "han",
    "zh_TW": "han", "": "latin",
}  # fmt: skip
_LOCALE_LANGS = {
    "am": "other_script", "ar": "arabic", "bn": "bengali", "el": "greek", "fa": "arabic", "gu": "gujarati",
    "he": "hebrew", "hi": "devanagari", "ja": "japanese", "kn": "kannada", "ko": "hangul", "ml": "malayalam",
    "mr": "devanagari", "ru": "cyrillic", "si": "other_script", "sw": "latin_other", "ta": "tamil",
    "te": "telugu", "th": "thai", "tr": "latin_other", "uk": "cyrillic", "ur": "arabic", "vi": "latin_other",
    "zh_CN": "han", "pt_BR": "latin_other", "id": "latin_other", "de": "latin_other", "ms": "latin_other",
    "fil": "latin_other", "en": "latin",
}  # fmt: skip
_TAOCL = {
    "": "latin", "cs": "latin_other", "de": "latin_other", "el": "greek", "es": "latin_other",
    "fr": "latin_other", "id": "latin_other", "it": "latin_other", "ja": "japanese", "ko": "hangul",
    "pl": "latin_other", "pt": "latin_other", "ro": "latin_other", "ru": "cyrillic", "sl": "latin_other",
    "uk": "cyrillic", "zh": "han", "zh-Hant": "han",
}  # fmt: skip


class _Git:
    def __init__(self, mirrors: Path, name: str) -> None:
        self.repo = mirrors / name / "repo"
        self.commit = PINNED[name]

    def ls(self, under: str) -> list[str]:
        out = subprocess.run(
            ["git", "-C", str(self.repo), "ls-tree", "-r", "--name-only", self.commit, *([under] if under else [])],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        return sorted(x for x in out.splitlines() if x)

    def show(self, path: str) -> str:
        out = subprocess.run(
            ["git", "-C", str(self.repo), "show", f"{self.commit}:{path}"], check=True, capture_output=True
        ).stdout
        return out.decode("utf-8", "replace")


def _size(rng: random.Random, lo: int = 300, hi: int = 60_000) -> int:
    """Log-uniform target size in bytes (so every threshold sees requests on both sides)."""
    return int(lo * (hi / lo) ** rng.random())


def _take(rng: random.Random, texts: list[str], target: int, sep: str = "\n\n") -> str:
    out: list[str] = []
    n = 0
    start = rng.randrange(len(texts))
    i = start
    while n < target:
        t = texts[i % len(texts)]
        out.append(t)
        n += len(t.encode())
        i += 1
        if i - start > 4 * len(texts):
            break
    s = sep.join(out)
    b = s.encode()[:target]
    return b.decode("utf-8", "ignore")


def _chat(kind: str, source: str, content: str, system: str | None = None, **extra: Any) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    if system is not None:
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": content})
    return {"messages": msgs, "metadata": {"kind": kind, "source": source}, **extra}


_ASKS = (
    "Summarise the following text.",
    "Translate the following into English.",
    "What are the key points here?",
    "Explain this to a beginner.",
    "",
)


def _prose(mirrors: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    tldr = _Git(mirrors, "tldr-pages+tldr")
    for lang, kind in _TLDR_LANGS.items():
        d = f"pages.{lang}" if lang else "pages"
        files = [f for f in tldr.ls(f"{d}/common") if f.endswith(".md")]
        rng.shuffle(files)
        pages = [tldr.show(f) for f in files[:160]]
        if not pages:
            continue
        for _ in range(10 if lang else 30):
            body = _take(rng, pages, _size(rng))
            yield _chat(kind, f"tldr_{lang or 'en'}", f"{rng.choice(_ASKS)}\n\n{body}".strip())
    taocl = _Git(mirrors, "jlevy+the-art-of-command-line")
    for lang, kind in _TAOCL.items():
        text = taocl.show(f"README-{lang}.md" if lang else "README.md")
        paras = [p for p in text.split("\n\n") if p.strip()]
        for _ in range(8):
            yield _chat(kind, f"taocl_{lang or 'en'}", _take(rng, paras, _size(rng, 1000, 90_000)))
    yt = _Git(mirrors, "code-charity+youtube")
    for loc, kind in _LOCALE_LANGS.items():
        raw = yt.show(f"_locales/{loc}/messages.json")
        try:
            msgs = [v["message"] for v in json.loads(raw).values() if isinstance(v, dict) and "message" in v]
        except ValueError:
            continue
        for _ in range(6):
            yield _chat(kind, f"locale_{loc}", _take(rng, msgs, _size(rng, 300, 20_000), sep=". "))
        yield _chat(
            "json", f"locale_{loc}", f"Check this translation file:\n\n{raw[: _size(rng, 2000, 30000)]}"
        )
        # a non-English chat with an English system prompt (item 7)
        yield _chat(
            kind, f"locale_{loc}", _take(rng, msgs, 6000, sep=". "), system="You are a helpful assistant."
        )


def _code(mirrors: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    for name, ext in (("TheAlgorithms+Rust", ".rs"), ("TheAlgorithms+Go", ".go")):
        g = _Git(mirrors, name)
        files = [f for f in g.ls("") if f.endswith(ext)]
        rng.shuffle(files)
        srcs = [g.show(f) for f in files[:200]]
        for _ in range(40):
            code = _take(rng, srcs, _size(rng, 500, 70_000))
            lang = "rust" if ext == ".rs" else "go"
            fence = rng.random() < 0.5
            content = f"Review this code:\n\n```{lang}\n{code}\n```" if fence else code
            yield _chat("code", name, content)
    yt = _Git(mirrors, "code-charity+youtube")
    js = [f for f in yt.ls("") if f.endswith((".js", ".css")) and "test" not in f]
    srcs = [yt.show(f) for f in js[:120]]
    for _ in range(30):
        code = _take(rng, srcs, _size(rng, 500, 70_000))
        if rng.random() < 0.4:  # minified
            code = " ".join(code.split())
        yield _chat("code", "youtube_js", f"What does this do?\n```js\n{code}\n```")


def _hexdump(data: bytes) -> str:
    return "\n".join(" ".join(f"{b:02x}" for b in data[i : i + 16]) for i in range(0, len(data), 16))


_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "error",
    "warning",
    "info",
    "request",
    "user",
    "session",
    "cache",
    "disk",
    "memory",
    "timeout",
]
_EMOJI = "😀😂🥲😍🤔👍🙏🔥🎉💡✅❌🚀🌍🐍☕️❤️👀🤖📦"


def _data(rng: random.Random) -> Iterator[dict[str, Any]]:
    for _ in range(40):
        raw = rng.randbytes(_size(rng, 200, 40_000))
        b64 = base64.b64encode(raw).decode()
        r = rng.random()
        if r < 0.4:
            lines = "\n".join(b64[i : i + 76] for i in range(0, len(b64), 76))
            yield _chat("base64", "synthetic", f"Decode this base64:\n\n{lines}")
        elif r < 0.7:
            yield _chat(
                "base64", "synthetic", f"Here is the image: data:image/png;base64,{b64} What is in it?"
            )
        else:
            yield _chat("hex", "synthetic", f"Explain this dump:\n\n{_hexdump(raw[: len(raw) // 3])}")
    for _ in range(25):
        n = max(1, _size(rng, 100, 40_000) // 40)
        ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n)]
        yield _chat("uuid", "synthetic", json.dumps(ids, indent=rng.choice([None, 2])))
    for _ in range(30):
        rows = max(1, _size(rng, 100, 40_000) // 25)
        csv_lines = ["sepal_length,sepal_width,petal_length,petal_width,species"]
        sp = ("setosa", "versicolor", "virginica")
        for _ in range(rows):
            v = [f"{rng.uniform(0.1, 8):.1f}" for _ in range(4)]
            csv_lines.append(",".join([*v, rng.choice(sp)]))
        csv = "\n".join(csv_lines)
        content = f"```csv\n{csv}\n```" if rng.random() < 0.5 else csv
        yield _chat("csv", "synthetic", f"Analyse this data:\n{content}")
    for _ in range(25):
        rows = max(1, _size(rng, 100, 40_000) // 70)
        sql = "\n".join(
            f'INSERT INTO "InvoiceLine" ("InvoiceLineId", "InvoiceId", "TrackId", "UnitPrice", "Quantity") '
            f"VALUES ({i + 1}, {rng.randint(1, 400)}, {rng.randint(1, 3500)}, 0.{rng.randint(10, 99)}, 1);"
            for i in range(rows)
        )
        content = f"```sql\n{sql}\n```" if rng.random() < 0.5 else sql
        yield _chat("sql", "synthetic", f"Optimise this script:\n{content}")
    for _ in range(25):
        n = max(1, _size(rng, 100, 40_000) // 110)
        log = "\n".join(
            f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z "
            f"{rng.choice(['INFO', 'WARN', 'ERROR', 'DEBUG'])} [{rng.choice(_WORDS)}-{rng.randint(1, 64)}] "
            f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(0, 255)} "
            f"GET /api/v{rng.randint(1, 3)}/{rng.choice(_WORDS)}/{rng.getrandbits(32):08x} "
            f"status={rng.choice([200, 404, 500, 503])} latency_ms={rng.randint(1, 9000)}"
            for _ in range(n)
        )
        yield _chat("log", "synthetic", f"Why are these requests failing?\n\n{log}")
    for _ in range(25):
        n = max(1, _size(rng, 100, 30_000) // 60)
        yaml_lines = []
        for i in range(n):
            yaml_lines.append(f"  - name: {rng.choice(_WORDS)}-{i}\n    replicas: {rng.randint(1, 9)}")
            yaml_lines.append(f"    image: registry.example.com/{rng.choice(_WORDS)}:{rng.randint(1, 20)}.0")
        yield _chat("config", "synthetic", "services:\n" + "\n".join(yaml_lines))
    for _ in range(25):
        turns = []
        for _ in range(max(1, _size(rng, 100, 20_000) // 80)):
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 10)))
            emo = "".join(rng.choice(_EMOJI) for _ in range(rng.randint(1, 6)))
            turns.append(f"{words} {emo}")
        yield _chat("emoji", "synthetic", "\n".join(turns))


_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository and return its text.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "path relative to the root"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command in the sandbox and return stdout and stderr.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout_s": {"type": "integer", "description": "seconds before the command is killed"},
                },
                "required": ["command"],
            },
        },
    },
]


def _agents(mirrors: Path, rng: random.Random) -> Iterator[dict[str, Any]]:
    g = _Git(mirrors, "TheAlgorithms+Go")
    files = [f for f in g.ls("") if f.endswith(".go")][:150]
    srcs = [g.show(f) for f in files]
    tldr = _Git(mirrors, "tldr-pages+tldr")
    notes = [tldr.show(f) for f in tldr.ls("pages/common")[:200]]
    for i in range(60):
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent. Use the tools."},
            {"role": "user", "content": "Find and fix the bug in the sorting package."},
        ]
        for step in range(rng.randint(1, 6)):
            args = {"path": rng.choice(files)} if rng.random() < 0.6 else {"command": "go test ./..."}
            name = "read_file" if "path" in args else "run_shell"
            call_id = f"call_{i}_{step}"
            field = rng.choice(["reasoning_content", "reasoning", None])
            asst: dict[str, Any] = {
                "role": "assistant",
                "content": rng.choice(["", "Let me look.", None]),
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
            if field is not None:
                asst[field] = _take(rng, notes, _size(rng, 200, 20_000))
            msgs.append(asst)
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": name,
                    "content": _take(rng, srcs, _size(rng, 200, 9000)),
                }
            )
        body: dict[str, Any] = {
            "messages": msgs,
            "tools": _TOOLS,
            "metadata": {"kind": "agent", "source": "synthetic"},
        }
        if rng.random() < 0.3:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        yield body


def build(mirrors: Path, seed: int = 0) -> list[dict[str, Any]]:
    """Every request body of the corpus (deterministic for a seed and the pinned commits).

    Raises:
        subprocess.CalledProcessError: a mirror or pinned commit is missing.
    """
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for gen in (_prose(mirrors, rng), _code(mirrors, rng), _data(rng), _agents(mirrors, rng)):
        out.extend(gen)
    for i, body in enumerate(out):
        body["metadata"]["id"] = str(i)
        if rng.random() < 0.8:
            body["max_tokens"] = int(16 * (8192 / 16) ** rng.random())
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--mirrors DIR --out FILE [--seed N]``."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mirrors", default="/work/.mirror")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    rows = build(Path(a.mirrors), a.seed)
    with Path(a.out).open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{len(rows)} requests -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
