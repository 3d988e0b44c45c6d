"""Long commands on a fresh HOME: on a terminal they draw progress on stderr (a spinner or bars, with the
ingest's files/s and chunks/s); piped, stderr holds only the closing one-line summary (no blank line), and
stdout holds the command's output alone (JSON that parses from its first byte)."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run(args: list[str], cwd: Path, terminal: bool) -> tuple[str, str, int]:
    """(stdout, stderr, exit code) of `shoal ARGS` on a fresh HOME, with stderr a pseudo-terminal or a pipe."""
    (cwd / "home").mkdir(exist_ok=True)
    fresh = {"HOME": str(cwd / "home"), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env = {**os.environ, **fresh, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("SHOAL_DEBUG", None)
    cmd = [sys.executable, "-m", "shoal.cli", *args]
    if not terminal:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        return r.stdout, r.stderr, r.returncode
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout else ""
    proc.wait(timeout=60)
    return out, ANSI.sub("", err.decode(errors="replace")).replace("\r", "\n"), proc.returncode


def test_encode_shows_a_spinner_on_a_terminal_and_ends_with_a_summary(tmp_path: Path) -> None:
    out, err, code = run(["encode", "a harbour at dawn"], tmp_path, terminal=True)
    assert code == 0, err
    assert "encoding 1 text with sentence-transformers/all-MiniLM-L6-v2" in err, err
    assert [ln for ln in err.splitlines() if ln.strip()][-1].startswith("encoded 1 text (dense) with "), err
    assert json.loads(out)["dims"] == 384
    out, err, code = run(["encode", "a harbour at dawn"], tmp_path, terminal=False)
    assert code == 0 and err.startswith("encoded 1 text (dense) with ") and err.count("\n") == 1, repr(err)
    assert json.loads(out)["dims"] == 384


@pytest.mark.slow
def test_taxonomy_fit_shows_progress_and_prints_clean_json(tmp_path: Path, tiny_bert: Path) -> None:
    taxonomy = REPO / "examples" / "taxonomy" / "products.yaml"
    labelled = tmp_path / "fit.jsonl"  # a few of the example's labelled texts: a fit of seconds on a tiny model
    labelled.write_text("".join((REPO / "examples" / "taxonomy" / "labelled.jsonl").read_text().splitlines(True)[:12]))
    args = ["taxonomy", "fit", str(taxonomy), "--labelled", str(labelled), "--model", str(tiny_bert), "--folds", "2"]
    args += ["--output", str(tmp_path / "p.fit.npz")]
    out, err, code = run(args, tmp_path, terminal=False)
    assert code == 0, err
    assert out.startswith("{") and json.loads(out)["saved"] == str(tmp_path / "p.fit.npz"), out[:200]
    assert re.fullmatch(r"fitted on \d+ texts in \d+ s: [^\n]+; saved \S+p\.fit\.npz\n", err), repr(err)
    out, err, code = run(args, tmp_path, terminal=True)
    assert code == 0 and json.loads(out)["model"] == str(tiny_bert)
    assert "fitting products.yaml to " in err and "-fold cross-validation" in err, err


@pytest.mark.slow
def test_ingest_progress_shows_files_and_chunks_per_second(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"note-{i}.md").write_text(f"# Note {i}\n\nThe ferry to island {i} leaves at dawn every Monday.\n")
    out, err, code = run(["ingest", str(docs), "--db", str(tmp_path / "db")], tmp_path, terminal=True)
    assert code == 0, err
    assert re.search(r"[\d.]+ files/s · [\d.]+ chunks/s · [\d,]+ tok/s", err), err
    last = [ln for ln in out.splitlines() if ln.strip()][-1]
    assert re.fullmatch(
        r"3 files ingested \(0 unchanged\): 3 chunks written in [\d.]+ s \([\d.]+ files/s, [\d.]+ chunks/s\)", last
    ), last
    out, err, code = run(["ingest", str(docs), "--db", str(tmp_path / "db"), "--json"], tmp_path, terminal=False)
    assert code == 0 and json.loads(out)["files_unchanged"] == 3 and err == "", err
