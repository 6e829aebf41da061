"""CLI conventions (issue 16, item 3): one meaning for --json everywhere, and a clear error
instead of a traceback for a missing or incomplete `tbr demo --envoy-config`."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from tbr.cli import build_parser
from tests.service.contracts import REPO


def subcommand_parsers(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[f"{prefix}{name}"] = sub
                out.update(subcommand_parsers(sub, f"{prefix}{name} "))
    return out


def test_json_is_one_flag_with_one_meaning() -> None:
    """Every --json is a flag (JSON on stdout instead of text); a file is always --json-out PATH."""
    with_json = {}
    for name, sub in subcommand_parsers(build_parser()).items():
        for action in sub._actions:
            if "--json" in action.option_strings:
                with_json[name] = action
                assert action.nargs == 0 and action.const is True, f"tbr {name} --json takes a value"
            if "--json-out" in action.option_strings:
                assert action.nargs is None, f"tbr {name} --json-out must take a path"
    assert {"demo", "plan", "simulate", "eval-estimator"} <= set(with_json)


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tbr", "demo", "--requests", "1", *args],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("admin: [unclosed", "not valid YAML"),
        ("admin:\n  address: {socket_address: {address: 0.0.0.0, port_value: 9901}}\n", "incomplete"),
        (
            (REPO / "envoy" / "envoy.yaml").read_text().replace("name: short_pool", "name: small_pool"),
            "short_pool",
        ),
    ],
)
def test_demo_envoy_config_errors_are_clear(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "envoy.yaml"
    if content is not None:
        path.write_text(content)
    proc = demo("--envoy-config", str(path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"--envoy-config {path}" in proc.stderr and message in proc.stderr, proc.stderr


def test_demo_outside_a_checkout_says_what_it_needs(tmp_path: Path) -> None:
    """A non-editable install has no config/ or envoy/ beside its packages: the demo names the
    missing files and how to run it, instead of a traceback."""
    from tbr.cmd_demo import checkout_files_missing

    router = tmp_path / "config" / "router.yaml"
    envoy = tmp_path / "envoy.yaml"
    assert checkout_files_missing(router, None) == [str(router)]  # envoy/envoy.yaml is in this checkout
    assert checkout_files_missing(router, envoy) == [str(router)]
    router.parent.mkdir()
    router.write_text("pools: []\n")
    assert checkout_files_missing(router, envoy) == []
    assert checkout_files_missing(REPO / "config" / "router.yaml", None) == []
