"""Read the project's lock files (``requirements/*.txt``, written by ``make lock``) and compare an
environment with them.

    python -m tests.tools.lockdiff requirements/lock.txt FREEZE.txt    # pip freeze output

prints one line per package whose version differs from the lock (``name lock -> installed``), is
missing or is not in the lock, and exits 1 when there is any (``make test-latest`` prints them).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

__all__ = ["Pin", "applies", "diff", "parse_freeze", "parse_lock"]

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    """One locked requirement: canonical ``name``, exact ``version``, environment ``marker``
    (None: every environment) and the allowed artifact ``hashes``."""

    name: str
    version: str
    marker: str | None
    hashes: frozenset[str]


def parse_lock(path: Path) -> list[Pin]:
    """Every ``name==version [; marker]`` entry of a uv/pip-tools lock with its ``--hash`` lines.

    Raises:
        ValueError: a requirement line that is not an exact pin (a lock pins everything).
    """
    pins: list[Pin] = []
    current: tuple[str, str, str | None] | None = None
    hashes: set[str] = set()
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("--hash="):
            hashes.update(_HASH.findall(line))
            continue
        if current is not None:
            pins.append(Pin(*current, frozenset(hashes)))
        m = _PIN.match(line)
        if m is None:
            raise ValueError(f"{path}: not an exact pin: {line!r}")
        current = (canonicalize_name(m[1]), m[2], m[3].strip() if m[3] else None)
        hashes = set()
    if current is not None:
        pins.append(Pin(*current, frozenset(hashes)))
    return pins


def applies(pin: Pin) -> bool:
    """Whether ``pin``'s marker holds in this interpreter's environment."""
    return pin.marker is None or Marker(pin.marker).evaluate()


def parse_freeze(text: str) -> dict[str, str]:
    """``{canonical name: version}`` of ``pip freeze`` output (editable and URL lines skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not name.startswith(("-", "#")):
            out[canonicalize_name(name)] = version
    return out


def diff(locked: list[Pin], installed: Mapping[str, str]) -> list[str]:
    """Lines describing every difference between the pins that apply here and ``installed``."""
    want = {p.name: p.version for p in locked if applies(p)}
    lines = [
        f"{name} {want[name]} -> {installed.get(name, 'missing')}"
        for name in sorted(want)
        if installed.get(name) != want[name]
    ]
    lines += [f"{name} not in the lock -> {installed[name]}" for name in sorted(set(installed) - set(want))]
    return lines


def main(argv: list[str]) -> int:
    """CLI: ``lockdiff LOCK FREEZE``; exit 1 when they differ."""
    if len(argv) != 2:
        print("usage: python -m tests.tools.lockdiff LOCK FREEZE", file=sys.stderr)
        return 2
    lines = diff(parse_lock(Path(argv[0])), parse_freeze(Path(argv[1]).read_text(encoding="utf-8")))
    print("\n".join(lines) if lines else "no differences")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
