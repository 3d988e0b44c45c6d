"""`shoal reindex --watch` follows a recorded folder: an edited file is re-ingested without a new command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectors import open_store
from tests.corpus import write_doc


def texts(db: str) -> str:
    return " ".join(r["text"] for r in open_store(db).rows("chunks", ["text"]))


@pytest.mark.slow
def test_reindex_watch_picks_up_an_edit(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_doc(root / "a.md", "markdown", "A", [("One", ["The first version of the note mentions otters."])])
    db = f"lancedb://{tmp_path / 'db'}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cli = [sys.executable, "-c", "from shoal.cli import app; app()"]
    subprocess.run([*cli, "ingest", str(root), "--db", db, "-q"], env=env, check=True, capture_output=True)
    assert "otters" in texts(db)
    proc = subprocess.Popen([*cli, "reindex", "--db", db, "--watch", "-q", "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the initial reindex pass has finished
        assert '"files_unchanged":1' in first, first + (proc.stderr.read() if proc.poll() is not None else "")
        (root / "a.md").write_text("# A\n\n## One\n\nThe second version of the note mentions beavers.\n")
        deadline = time.monotonic() + 120  # bounds a hang; not a speed threshold
        while "beavers" not in texts(db) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        now = texts(db)
        assert "beavers" in now and "otters" not in now
    finally:
        proc.terminate()
        proc.wait(timeout=30)
