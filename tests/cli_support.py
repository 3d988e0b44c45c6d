"""Running `shoal` as a user does: a fresh process in a folder of the test's own, and checks on what it prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def shoal(
    *args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`shoal ARGS` in `cwd` (this checkout's code, offline); stdin closed unless given."""
    full = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    full.pop("SHOAL_DEBUG", None)
    cmd = [sys.executable, "-m", "shoal.cli", *args]
    return subprocess.run(
        cmd, cwd=cwd, env={**full, **(env or {})}, input=stdin if stdin is not None else "", capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip


def assert_short_error(r: subprocess.CompletedProcess[str], code: str, exit_code: int) -> list[str]:
    """The command failed with `exit_code`, saying `code` in one or two lines on stderr, with no traceback."""
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == exit_code, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert 1 <= len(lines) <= 2, r.stderr
    assert lines[0].startswith(f"{code}: "), r.stderr
    return lines
