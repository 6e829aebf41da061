"""Build a tiny random-weight Qwen3 or Llama-3 model directory that real vLLM can serve on a CPU.

Runs with the vLLM venv's Python (``.venv-vllm``: torch + transformers), not the project's; it
imports nothing from this repository. The weights are seeded (``torch.manual_seed``), so the same
seed gives the same files; only the tokenizer is real: its files are copied from
``../shared/data/tokenizers/<family>``, so prompt token counts are those of the real model family.

Shape (issue 29): 2 layers, hidden 128, 4 heads of 32 (vLLM's CPU attention needs a head size in
32, 64, 80, 96, 112, 128, ...), 2 KV heads, tied embeddings: ~49 MB (Qwen3, vocabulary 151,936)
or ~66 MB (Llama-3, 128,256), built in about a second.

Usage::

    .venv-vllm/bin/python devstack/vllm/tiny_model.py --family qwen3 \\
        --tokenizer-dir ../shared/data/tokenizers/qwen3 --out /tmp/tiny-qwen3 --seed 0
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

MAX_POSITION_EMBEDDINGS = 65536
"""Context the model config declares (tokens); a pool's ``--max-model-len`` must not exceed it."""

_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
    "tie_word_embeddings": True,
}

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def build(family: str, tokenizer_dir: Path, out: Path, seed: int) -> Path:
    """Write a random-weight ``family`` model (``qwen3`` or ``llama3``) with the tokenizer of
    ``tokenizer_dir`` to ``out`` (``config.json``, ``model.safetensors``, tokenizer files);
    returns ``out``.

    Raises:
        ValueError: unknown family.
        FileNotFoundError: a tokenizer file is missing.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    if family == "qwen3":
        model = Qwen3ForCausalLM(
            Qwen3Config(vocab_size=151936, bos_token_id=151643, eos_token_id=151645, **_SHAPE)
        )
    elif family == "llama3":
        model = LlamaForCausalLM(
            LlamaConfig(vocab_size=128256, bos_token_id=128000, eos_token_id=128009, **_SHAPE)
        )
    else:
        raise ValueError(f"family must be qwen3 or llama3, got {family!r}")
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out)
    for name in _TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, out / name)
    return out


def main() -> None:
    """Command line: ``--family``, ``--tokenizer-dir``, ``--out``, ``--seed``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=("qwen3", "llama3"), required=True)
    p.add_argument("--tokenizer-dir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    print(build(args.family, args.tokenizer_dir, args.out, args.seed))


if __name__ == "__main__":
    main()
