"""Every exit code the docs promise is the one the CLI returns: the tables, the README line, `--help`'s epilog,
each "`CODE` ... exit N" sentence, and real runs of the command line."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shoal.failures import FILES_FAILED, OK, UNREACHABLE, UNREACHABLE_CODES, USAGE
from tests.helpers import REPO

# what each code means, by a word its description must hold
MEANING = {OK: "ok|done", USAGE: "usage", UNREACHABLE: "reach", FILES_FAILED: "files failed"}
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def documented_tables() -> list[tuple[Path, dict[int, str]]]:
    """(page, {code: meaning}) of every `| exit code | meaning |` table."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"^\| exit code \| meaning \|\n\| --- \| --- \|\n((?:\| \d \|.*\n)+)", text, re.M):
            rows = dict(re.findall(r"^\| (\d) \| (.*) \|$", m.group(1), re.M))
            out.append((page, {int(k): v for k, v in rows.items()}))
    return out


def check_line(where: str, line: str) -> None:
    pairs = dict(re.findall(r"(\d) ([^,.]+)", line))
    assert {int(k) for k in pairs} == set(MEANING), (where, line)
    for code, words in MEANING.items():
        assert re.search(words, pairs[str(code)]), (where, code, pairs[str(code)])


def test_exit_code_tables_match_the_cli() -> None:
    tables = documented_tables()
    assert {p.name for p, _ in tables} >= {"troubleshooting.md", "cli.md"}, [p.name for p, _ in tables]
    for page, rows in tables:
        assert set(rows) == set(MEANING), (page.name, rows)
        for code, words in MEANING.items():
            assert re.search(words, rows[code]), (page.name, code, rows[code])


def test_readme_and_help_say_the_same_exit_codes() -> None:
    from typer.testing import CliRunner

    from shoal.cli import app

    readme = (REPO / "README.md").read_text().replace("\n", " ")
    (line,) = re.findall(r"Exit codes: (0 [^[]+?)\. \[", readme)
    check_line("README.md", line)
    out = CliRunner().invoke(app, ["--help"], terminal_width=400).output.replace("\n", " ")
    (epilog,) = re.findall(r"Exit codes: (0 .+? some files failed)", out)
    check_line("shoal --help", re.sub(r"\s+", " ", epilog))


def test_each_error_named_with_its_exit_code_gets_that_code() -> None:
    said = []
    for page in PAGES:
        text = page.read_text().replace("\n", " ")
        said += [(page.name, c, int(n)) for c, n in re.findall(r"`([A-Z_]{4,})`[^.;]{0,40}?exit(?: code)? (\d)", text)]
        said += [(page.name, c, int(n)) for n, c in re.findall(r"exit(?: code)? (\d)[^.;`]{0,30}`([A-Z_]{4,})`", text)]
    assert said, "the pattern found no sentence naming an error with its exit code"
    wrong = [(p, c, n) for p, c, n in said if n != (UNREACHABLE if c in UNREACHABLE_CODES else USAGE)]
    assert not wrong, wrong


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shoal.cli", *args], capture_output=True, text=True, timeout=120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_real_runs_exit_as_documented(tmp_path: Path) -> None:
    missing = run_cli("search", "x", "--db", f"lancedb://{tmp_path / 'nothing'}")
    assert missing.returncode == USAGE, missing.stderr
    assert "NO_STORE" in missing.stderr and "Traceback" not in missing.stderr
    down = run_cli("status", "--url", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == UNREACHABLE, down.stderr
    assert "Traceback" not in down.stderr


@pytest.mark.parametrize("code", sorted(UNREACHABLE_CODES))
def test_busy_and_unreachable_codes_are_documented_as_retryable(code: str) -> None:
    """Each code that exits 2 is named in the troubleshooting page, so a user can look it up."""
    text = (REPO / "docs" / "troubleshooting.md").read_text() + (REPO / "docs" / "http-api.md").read_text()
    assert f"`{code}`" in text, code
