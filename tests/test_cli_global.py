"""The group's own flags: --help/-h, --version, --debug (anywhere, or SHOAL_DEBUG=1), and usage exit codes.

Each case runs `shoal` as a user does: a fresh process in an empty folder of the test's own. The unreachable
server is a loopback port nothing listens on (taken from the OS, then closed)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import shoal as shoal_package
from tests.cli_support import assert_short_error, shoal
from tests.helpers import REPO, free_port

COMMANDS = [
    "serve",
    "worker",
    "encode",
    "status",
    "tune",
    "ingest",
    "search",
    "reindex",
    "collections",
    "sources",
    "forget",
    "delete",
    "mcp",
    "extract",
    "models",  # a group (`shoal models pull`): typer lists groups after the plain commands
]


def _help_sections(text: str) -> dict[str, str]:
    """The help text cut at its section titles ("Global options:", "Commands:")."""
    out: dict[str, str] = {}
    title = "head"
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            continue
        out[title] = out.get(title, "") + line + "\n"
    return out


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--debug", "--help"], ["-h", "search"]])
def test_group_help_lists_the_global_options_and_every_command(tmp_path: Path, args: list[str]) -> None:
    r = shoal(*args, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    sections = _help_sections(r.stdout)
    flags = sections["Global options"]
    for flag in ("-h, --help", "--version", "--debug"):
        assert f"  {flag}  " in flags, flags
    listed = [line.split()[0] for line in sections["Commands"].splitlines() if line.startswith("  ")]
    assert [c for c in listed if c in COMMANDS] == COMMANDS, listed
    assert "Exit codes: 0 ok, 1 usage or config error, 2 server or store unreachable, 3" in r.stdout
    assert list(tmp_path.iterdir()) == [], "help created nothing"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.slow
def test_every_command_answers_both_help_flags(tmp_path: Path, command: str) -> None:
    long, short = shoal(command, "--help", cwd=tmp_path), shoal(command, "-h", cwd=tmp_path)
    assert long.returncode == 0 and long.stdout.startswith("Usage: "), long.stderr
    assert f" {command} " in long.stdout.splitlines()[0]
    assert short.returncode == 0 and short.stdout == long.stdout


@pytest.mark.parametrize("args", [["--version"], ["--debug", "--version"], ["--version", "--debug"]])
def test_version_is_the_package_version(tmp_path: Path, args: list[str]) -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert shoal_package.__version__ == declared, "shoal.__version__ follows pyproject.toml"
    r = shoal(*args, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == f"shoal {declared}\n" and r.stderr == "", (r.stdout, r.stderr)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--bogus"], "No such option: --bogus"),
        (["nosuchcommand"], "No such command 'nosuchcommand'"),
        (["search", "--bogus", "q"], "No such option: --bogus"),
        (["encode", "x", "--dtype", "nonsense"], "Invalid value for '--dtype'"),
        ([], "Usage: "),  # no command: the help, as a usage error
    ],
    ids=["group-option", "command", "command-option", "choice", "no-command"],
)
def test_usage_errors_exit_1_without_a_traceback(tmp_path: Path, args: list[str], says: str) -> None:
    r = shoal(*args, cwd=tmp_path)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert says in r.stderr and "Traceback" not in r.stderr and r.stdout == "", r.stderr
    if args:
        assert len(r.stderr.strip().splitlines()) <= 4, r.stderr  # usage line, the try-help line, the error


@pytest.fixture(scope="module")
def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize(
    "args, env",
    [
        (["--debug", "encode", "hello", "--url", "URL"], {}),
        (["encode", "--debug", "hello", "--url", "URL"], {}),
        (["encode", "hello", "--url", "URL"], {"SHOAL_DEBUG": "1"}),
    ],
    ids=["before-command", "among-options", "environment"],
)
@pytest.mark.slow
def test_debug_anywhere_shows_the_traceback(tmp_path: Path, dead_url: str, args: list[str], env: dict) -> None:
    r = shoal(*[dead_url if a == "URL" else a for a in args], cwd=tmp_path, env=env)
    assert r.returncode == 1 and "Traceback (most recent call last)" in r.stderr, r.stderr[-2000:]
    assert "Unreachable" in r.stderr


@pytest.mark.parametrize("value", ["0", "false", ""])
@pytest.mark.slow
def test_debug_off_values_keep_the_short_error(tmp_path: Path, dead_url: str, value: str) -> None:
    r = shoal("encode", "hello", "--url", dead_url, cwd=tmp_path, env={"SHOAL_DEBUG": value})
    assert_short_error(r, "UNREACHABLE", 2)


@pytest.mark.slow
def test_debug_after_double_dash_is_text(tmp_path: Path, dead_url: str) -> None:
    """After `--`, `--debug` is an argument like any other (here a text to encode), not the flag."""
    r = shoal("encode", "--url", dead_url, "--", "--debug", cwd=tmp_path)
    assert_short_error(r, "UNREACHABLE", 2)


def test_help_and_version_import_no_pydantic_and_no_torch() -> None:
    """Typer builds pydantic adapters for the options it parses: the group declares none, so help stays light."""
    code = (
        "import sys\nfrom shoal.cli import app\n"
        "for args in (['--help'], ['--version'], ['search', '--help'], ['ingest', '-h']):\n"
        "    try:\n        app(args)\n    except SystemExit as e:\n        assert e.code == 0, (args, e.code)\n"
        "print('LOADED', sorted(m for m in ('pydantic', 'torch', 'rich') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip().splitlines()[-1] == "LOADED []", out.stdout[-500:] + out.stderr[-2000:]
