"""Compression bombs: decoding stops at the bound *without* first materialising the whole
output. Each decode runs in a child process whose address space is capped (RLIMIT_AS) well
below the bomb's decoded size, so an unbounded decompress fails with MemoryError."""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path

import brotli
import pytest
import zstandard

BOMB_DECODED_BYTES = 512 << 20
ZEROS = b"\0" * (1 << 20)


def gzip_bomb(decoded_mib: int) -> bytes:
    """``decoded_mib`` MiB of zeros as gzip, built cheaply: after a full flush each 1 MiB block compresses
    to the same bytes, so one block is repeated (the trailer's CRC is then wrong, but decoding
    stops at the bound long before it)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = c.compress(ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(ZEROS) + c.flush(zlib.Z_FULL_FLUSH)
    return first + block * (decoded_mib - 1) + c.flush()


def _gzip_bomb() -> bytes:
    return gzip_bomb(BOMB_DECODED_BYTES >> 20)


def _br_bomb() -> bytes:
    c = brotli.Compressor(quality=1)
    out: bytes = b"".join(c.process(ZEROS) for _ in range(BOMB_DECODED_BYTES >> 20)) + c.finish()
    return out


def _zstd_bomb() -> bytes:
    c = zstandard.ZstdCompressor(level=1).compressobj()
    return b"".join(c.compress(ZEROS) for _ in range(BOMB_DECODED_BYTES >> 20)) + c.flush()


CHILD = """
import resource, sys
from extproc.core.response.encoding import DecodeError, make_decoder
data = open(sys.argv[1], "rb").read()
cap = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
dec = make_decoder(sys.argv[2], max_output_bytes=8 << 20)
try:
    dec.decode(data)  # one message, as a BUFFERED response body arrives
except DecodeError as exc:
    print("bounded:", exc)
    sys.exit(0)
print("decoded everything")
sys.exit(1)
"""


def _baseline_address_space_bytes() -> int:
    code = (
        "import extproc.core.response.encoding, resource\n"
        "print([l for l in open('/proc/self/status') if l.startswith('VmPeak')][0].split()[1])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) * 1024


@pytest.mark.parametrize(("encoding", "make"), [("gzip", _gzip_bomb), ("br", _br_bomb), ("zstd", _zstd_bomb)])
def test_bomb_is_stopped_at_the_bound_without_exhausting_memory(
    tmp_path: Path, encoding: str, make: object
) -> None:
    bomb = make()  # type: ignore[operator]
    assert len(bomb) < BOMB_DECODED_BYTES // 100
    path = tmp_path / "bomb"
    path.write_bytes(bomb)
    cap = _baseline_address_space_bytes() + (160 << 20)  # far below the 512 MiB the bomb decodes to
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), encoding, str(cap)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bounded" in proc.stdout
