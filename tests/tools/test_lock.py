"""The locks (requirements/*.txt, `make lock`): they cover pyproject.toml, the image locks are the
same pins as the main lock, and the environment the tests run in is exactly the lock."""

from __future__ import annotations

import importlib.metadata
import os
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.tools.lockdiff import Pin, applies, diff, parse_lock

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "lock.txt"
IMAGE_LOCKS = [ROOT / "requirements" / "image-router.txt", ROOT / "requirements" / "image-pool.txt"]
PROJECT = "token-budget-router"


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return [r for r in reqs if canonicalize_name(r.name) != PROJECT]


def test_every_pin_is_exact_and_hashed() -> None:
    for path in [LOCK, *IMAGE_LOCKS]:
        pins = parse_lock(path)
        assert pins, path
        assert [p.name for p in pins if not p.hashes] == [], f"{path}: pins without hashes"


def test_lock_satisfies_every_requirement_of_pyproject() -> None:
    by_name: dict[str, list[Pin]] = {}
    for pin in parse_lock(LOCK):
        by_name.setdefault(pin.name, []).append(pin)
    unmet = []
    for req in _requirements():
        pins = [p for p in by_name.get(canonicalize_name(req.name), []) if applies(p)]
        if not pins or not all(req.specifier.contains(p.version, prereleases=True) for p in pins):
            unmet.append(f"{req} (locked: {[p.version for p in pins]})")
    assert unmet == [], "pyproject.toml asks for what the lock does not hold: run `make lock`"


@pytest.mark.parametrize("image_lock", IMAGE_LOCKS, ids=lambda p: p.name)
def test_image_locks_are_the_main_locks_pins(image_lock: Path) -> None:
    main = set(parse_lock(LOCK))
    assert [p for p in parse_lock(image_lock) if p not in main] == []


def test_the_environment_is_the_lock() -> None:
    if os.environ.get("TBR_UNLOCKED"):
        pytest.skip("TBR_UNLOCKED is set (make test-latest runs on the newest releases by design)")
    installed = {
        str(canonicalize_name(d.metadata["Name"])): d.version
        for d in importlib.metadata.distributions()
        if canonicalize_name(d.metadata["Name"]) != PROJECT
    }
    assert diff(parse_lock(LOCK), installed) == [], "the venv differs from requirements/lock.txt: make venv"


def test_diff_names_each_kind_of_difference() -> None:
    pins = [
        Pin("a", "1.0", None, frozenset()),
        Pin("b", "2.0", None, frozenset()),
        Pin("c", "3.0", "python_version < '3'", frozenset()),
    ]
    assert diff(pins, {"a": "1.0", "b": "2.1", "d": "4"}) == ["b 2.0 -> 2.1", "d not in the lock -> 4"]
    assert diff(pins, {"a": "1.0"}) == ["b 2.0 -> missing"]
