"""Print pyproject.toml's requirements, one per line: the core list plus the named extras.

Used by the Dockerfile to install dependencies (pinned by docker/constraints.txt) before the
project source is copied, so a code change does not reinstall them.

    python3 docker/requirements.py pyproject.toml [EXTRA ...]

Exits 2 with a message for an unknown extra.
"""

from __future__ import annotations

import sys
import tomllib


def main(argv: list[str]) -> int:
    """Write the requirement strings of ``argv[0]`` (a pyproject.toml) and extras ``argv[1:]``."""
    if not argv:
        print("usage: requirements.py PYPROJECT [EXTRA ...]", file=sys.stderr)
        return 2
    with open(argv[0], "rb") as f:
        project = tomllib.load(f)["project"]
    extras: dict[str, list[str]] = project.get("optional-dependencies", {})
    reqs = list(project.get("dependencies", [])) if not argv[1:] else []
    for extra in argv[1:]:
        if extra not in extras:
            print(
                f"requirements.py: no extra {extra!r} in {argv[0]} (have: {', '.join(sorted(extras))})",
                file=sys.stderr,
            )
            return 2
        reqs += extras[extra]
    name = project["name"]
    for req in reqs:
        if not req.startswith(name):  # self-references (name[extra]) are expanded by listing extras
            print(req)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
