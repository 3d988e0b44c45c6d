"""SIGKILL an ingest mid-run, run it again: the store holds exactly the chunks of a clean run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectors import open_store
from tests.corpus import make_corpus

N_DOCS = 48
CONFIG = """
chunking: {target_tokens: 48, overlap_tokens: 8}
files_in_flight: 2
write_batch_rows: 8
engine: {batch_size: 8, in_flight: 1}
"""


def run_cli(root: Path, db: Path, cfg: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-c", "from shoal.cli import app; app()", "ingest", str(root), "--db", f"lancedb://{db}"]
    return subprocess.Popen(
        [*cmd, "--config", str(cfg), "-q", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def committed(db: Path) -> int:
    path = db / "manifest.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as c:
            return c.execute("SELECT count(*) FROM sources WHERE status = 'ok'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def chunk_set(db: Path) -> list[tuple[str, str, int, str]]:
    rows = open_store(f"lancedb://{db}").rows("chunks", ["id", "source", "chunk_index", "chunk_hash"])
    return sorted((r["id"], r["source"], r["chunk_index"], r["chunk_hash"]) for r in rows)


@pytest.mark.slow
def test_sigkill_mid_ingest_then_resume_equals_clean_run(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    make_corpus(root, N_DOCS, seed=7)
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(CONFIG)
    crashed, clean = tmp_path / "crashed", tmp_path / "clean"

    proc = run_cli(root, crashed, cfg)
    deadline = time.monotonic() + 300  # a bound on a hang, not a performance threshold
    while committed(crashed) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_at_kill = committed(crashed)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert 3 <= done_at_kill < N_DOCS, "the kill landed mid-run"

    resumed = run_cli(root, crashed, cfg)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err.decode()[-2000:]
    assert committed(crashed) == N_DOCS
    summary = json.loads(out.decode().strip().splitlines()[-1])
    assert summary["files_unchanged"] == done_at_kill, "resumed where it stopped: committed files are skipped"
    assert summary["files_processed"] == N_DOCS - done_at_kill

    fresh = run_cli(root, clean, cfg)
    _, err = fresh.communicate(timeout=600)
    assert fresh.returncode == 0, err.decode()[-2000:]

    got, want = chunk_set(crashed), chunk_set(clean)
    assert len({g[0] for g in got}) == len(got), "no duplicates"
    assert got == want, "exactly the chunks of a clean run: none missing, none extra"
    sources = {g[1] for g in got}
    assert len(sources) == N_DOCS
