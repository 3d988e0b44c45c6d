"""`shoal search` finds a warm `shoal serve --db` of the same embedded store without being told: the server
leaves a discovery file in the store's folder (removed when it exits), the search checks the server is alive
and lets it answer (importing neither torch nor the store driver), and --verbose says where it ran; a stale
file is ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline import ingest
from pipeline.discovery import FILE, announce, discover
from tests.cli_support import shoal
from tests.helpers import REPO, LiveServer, free_port


def finished_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_stale_discovery_file_is_ignored(tmp_path: Path) -> None:
    db = tmp_path / "db"
    db.mkdir()
    assert discover(f"lancedb://{db}") is None  # no file: nothing to say
    record = {"url": f"http://127.0.0.1:{free_port()}", "pid": finished_pid(), "host": os.uname().nodename}
    (db / FILE).write_text(json.dumps(record))
    gone = discover(f"lancedb://{db}")
    assert gone is not None and gone.url is None and "is gone" in gone.why, gone
    (db / FILE).write_text(json.dumps({**record, "pid": os.getpid()}))  # alive, but nothing listens there
    silent = discover(str(db))  # a bare path is the same LanceDB store
    assert silent is not None and silent.url is None and "no answer" in silent.why, silent
    (db / FILE).write_text("{not json")
    assert "not a discovery file" in (discover(f"lancedb://{db}") or pytest.fail()).why


def test_nothing_is_announced_for_a_server_store_or_a_missing_folder(tmp_path: Path) -> None:
    assert announce("qdrant://localhost:6333/chunks", "127.0.0.1", 8080) is None
    assert announce(f"lancedb://{tmp_path / 'nowhere'}", "127.0.0.1", 8080) is None
    assert not (tmp_path / "nowhere").exists(), "serving never creates a store"


@pytest.mark.slow
def test_search_uses_the_warm_server_of_the_same_store(tmp_path: Path, engine: Any) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pump.md").write_text("# Pump\n\nError E-417 means the impeller is blocked. Stop the pump.\n")
    (docs / "lease.md").write_text("# Lease\n\nEither party may end the lease with three months' notice.\n")
    db = tmp_path / "db"
    ingest(docs, db=f"lancedb://{db}", client=engine)
    server = LiveServer(args=["--db", f"lancedb://{db}"]).wait_ready()
    try:
        record = json.loads((db / FILE).read_text())
        assert record["url"] == server.url and record["pid"] == server.proc.pid
        work = tmp_path / "elsewhere"  # another folder: the store is named by its path
        work.mkdir()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HOME": str(tmp_path / "home")}
        args = ["search", "E-417 impeller", "--db", f"lancedb://{db}", "--json", "--verbose", "-k", "1"]
        cmd = [sys.executable, "-X", "importtime", "-m", "shoal.cli", *args]
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"using the warm server at {server.url}" in r.stderr, r.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time")}
        assert not imported & {"torch", "lancedb", "engine.runtime"}, "the search loaded models or the store here"
        (hit,) = [json.loads(line) for line in r.stdout.splitlines()]
        assert hit["source"] == "pump.md"
    finally:
        server.stop()
    assert not (db / FILE).exists(), "the server removes its discovery file when it exits"
    r = shoal("search", "E-417 impeller", "--db", f"lancedb://{db}", "--json", "-k", "1", "--verbose", cwd=tmp_path)
    assert r.returncode == 0 and "searching here" in r.stderr and json.loads(r.stdout)["source"] == "pump.md"
