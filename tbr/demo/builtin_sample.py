"""Built-in demo sample, used when ``../shared/data`` is absent.

Every text here was written for this project (no dataset content), so it may ship with the code.
It covers the same kinds of input as the real replay at a much smaller scale: English prose, other
Latin-script languages, Chinese, Japanese, Korean, Russian, Thai, Hindi, code, a tool call and a
long document (generated deterministically from the prose below, ~200 KB).
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["BUILTIN_PROMPTS", "BUILTIN_TOOL_CALL", "generated_long_document"]

BUILTIN_PROMPTS: dict[str, list[str]] = {
    "prose": [
        "Our team is moving a small web service from a single virtual machine to two machines behind a "
        "load balancer. What should we check before the switch, and how do we roll back if the new setup "
        "misbehaves during the first hour?",
        "Write a short, friendly note to a neighbour asking whether they could water the tomatoes on the "
        "balcony while we are away for a long weekend. Mention that the watering can is next to the door.",
        "Explain in plain words why a queue in front of a busy server grows so quickly once the server is "
        "almost fully utilised, and what that means for choosing how many servers to run.",
        "I keep a notebook of books I have read. Suggest a simple way to organise it so that I can find "
        "a book again by topic, by the year I read it, and by how much I liked it.",
    ],
    "latin_other": [
        "Kannst du mir in wenigen Sätzen erklären, warum ein Zug bei Regen länger bremsen muss als bei "
        "trockenem Wetter? Bitte ohne Formeln.",
        "Je prépare un pique-nique pour huit personnes dimanche. Peux-tu me proposer une liste de courses "
        "simple, avec des plats qui se transportent bien ?",
        "¿Qué diferencia hay entre ahorrar una parte fija del sueldo cada mes y ahorrar lo que sobra al "
        "final del mes? Dame un ejemplo con números pequeños.",
    ],
    "cjk": [
        "请用简单的语言解释为什么晚上看手机屏幕会影响睡眠，并给出三个容易做到的改善建议。",
        "我们公司下个月要搬到新的办公室。请帮我列一个搬家前一周需要完成的事项清单。",
        "雨の日でも子どもと家の中で楽しめる遊びを五つ教えてください。道具はできるだけ少なくしたいです。",
        "来週の会議で新しい業務フローを説明します。分かりやすい説明の順番を提案してください。",
        "처음으로 혼자 여행을 가려고 합니다. 짐을 쌀 때 꼭 챙겨야 할 것들을 간단히 알려 주세요.",
        "회사에서 짧은 발표를 해야 하는데 긴장을 줄이는 방법이 있을까요? 실천하기 쉬운 것으로 부탁해요.",
    ],
    "other_scripts": [
        "Объясни, пожалуйста, простыми словами, почему зимой в квартире воздух становится сухим и как с "
        "этим справиться без дорогих приборов.",
        "Помоги составить план на неделю для подготовки к экзамену по истории: по часу в день, с "
        "повторением в конце.",
        "ช่วยแนะนำวิธีเริ่มต้นออกกำลังกายสำหรับคนที่ไม่เคยออกกำลังกายมาก่อน โดยใช้เวลาวันละไม่เกินสามสิบนาที",
        "कृपया सरल शब्दों में बताइए कि बारिश के मौसम में खाने को जल्दी खराब होने से कैसे बचाया जाए।",
    ],
    "code": [
        "Why does this function return the wrong total for an empty list, and how would you fix it?\n\n"
        "```python\ndef average(values):\n    total = 0\n    for v in values:\n        total += v\n"
        "    return total / len(values)\n```",
        "Rewrite this loop with a dictionary comprehension and keep the behaviour identical:\n\n"
        "```python\nresult = {}\nfor name, score in pairs:\n    if score >= 50:\n"
        "        result[name.lower()] = score\n```",
        "Write a small Go function `func chunk(xs []int, n int) [][]int` that splits a slice into pieces "
        "of at most n elements, and list the edge cases a test should cover.",
    ],
}
"""Short prompts by demo category (all written for this project)."""

BUILTIN_TOOL_CALL: dict[str, Any] = {
    "messages": [
        {
            "role": "user",
            "content": "Book a table for four at eight tonight at the Italian place on Mill Street.",
        }
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "book_table",
                "description": "Reserve a table at a restaurant.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "restaurant": {"type": "string", "description": "Name or address of the restaurant."},
                        "party_size": {"type": "integer", "minimum": 1, "description": "Number of guests."},
                        "time": {"type": "string", "description": "Local time, HH:MM, 24-hour clock."},
                    },
                    "required": ["restaurant", "party_size", "time"],
                },
            },
        }
    ],
}
"""One tool-calling request (OpenAI ``tools`` format), written for this project."""


def generated_long_document(target_bytes: int, seed: int = 0) -> str:
    """A long English document of about ``target_bytes`` UTF-8 bytes built from the prose above.

    Sentences of the built-in prose prompts are shuffled into numbered sections with a seeded RNG
    (same seed → same text). Used where a real long document (LongBench v2) is unavailable.
    """
    sentences = [
        s.strip() + "."
        for text in BUILTIN_PROMPTS["prose"]
        for s in text.replace("?", ".").split(".")
        if s.strip()
    ]
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    section = 0
    while size < target_bytes:
        section += 1
        body = " ".join(rng.choice(sentences) for _ in range(12))
        para = f"Section {section}. {body}\n\n"
        parts.append(para)
        size += len(para.encode("utf-8"))
    return "".join(parts)
