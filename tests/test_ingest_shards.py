"""Four ingest shards write one LanceDB store at once; one is SIGKILLed mid-run and restarted: every chunk is
there once, as a single clean run writes them, and files deleted later are gone after the next sharded run."""

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
from pipeline.shard import shard_of
from tests.corpus import make_corpus

N_DOCS = 32
SHARDS = 4
CONFIG = """
chunking: {target_tokens: 48, overlap_tokens: 8}
files_in_flight: 2
write_batch_rows: 8
engine: {batch_size: 8, in_flight: 1}
"""


def run_cli(root: Path, db: Path, cfg: Path, shard: str | None) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-c", "from shoal.cli import app; app()", "ingest", str(root), "--db", f"lancedb://{db}"]
    cmd += ["--config", str(cfg), "-q", "--json"] + (["--shard", shard] if shard else [])
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def committed(db: Path, root: Path, shard: int) -> int:
    """Files of one shard the manifest has committed."""
    path = db / "manifest.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as c:
            rels = [r[0] for r in c.execute("SELECT rel FROM sources WHERE status = 'ok'")]
    except sqlite3.OperationalError:
        return 0
    return sum(shard_of(r, SHARDS) == shard for r in rels)


def chunk_set(db: Path) -> list[tuple[str, str, int, str]]:
    rows = open_store(f"lancedb://{db}").rows("chunks", ["id", "source", "chunk_index", "chunk_hash"])
    return sorted((r["id"], r["source"], r["chunk_index"], r["chunk_hash"]) for r in rows)


def finish(procs: list[subprocess.Popen]) -> list[dict]:
    out = []
    for p in procs:
        stdout, err = p.communicate(timeout=900)
        assert p.returncode == 0, err.decode()[-3000:]
        out.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return out


@pytest.mark.slow
def test_four_shards_with_a_sigkill_equal_one_clean_run(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    make_corpus(root, N_DOCS, seed=11)
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(CONFIG)
    sharded, clean = tmp_path / "sharded", tmp_path / "clean"
    owned = [sum(shard_of(p.relative_to(root).as_posix(), SHARDS) == i for p in root.rglob("*") if p.is_file())
             for i in range(SHARDS)]  # fmt: skip
    victim = max(range(SHARDS), key=lambda i: owned[i])

    procs = [run_cli(root, sharded, cfg, f"{i}/{SHARDS}") for i in range(SHARDS)]
    deadline = time.monotonic() + 600  # a bound on a hang, not a performance threshold
    while committed(sharded, root, victim) < 2 and procs[victim].poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    procs[victim].send_signal(signal.SIGKILL)
    procs[victim].wait()
    at_kill = committed(sharded, root, victim)
    assert procs[victim].returncode == -signal.SIGKILL, procs[victim].stderr.read().decode()[-2000:]
    assert 2 <= at_kill < owned[victim], "the kill landed mid-run"
    others = finish([p for i, p in enumerate(procs) if i != victim])
    assert all(s["files_failed"] == [] for s in others)
    again = finish([run_cli(root, sharded, cfg, f"{victim}/{SHARDS}")])[0]
    assert again["files_unchanged"] == at_kill and again["files_processed"] == owned[victim] - at_kill
    assert again["shard"] == f"{victim}/{SHARDS}" and again["indexes"]
    finish([run_cli(root, clean, cfg, None)])
    got = chunk_set(sharded)
    assert len({g[0] for g in got}) == len(got), "no duplicates"
    assert got == chunk_set(clean), "exactly the chunks of a clean run: none missing, none extra"

    files = sorted(p for p in root.rglob("*") if p.is_file())
    gone = files[::9]  # files of several shards
    assert len({shard_of(p.relative_to(root).as_posix(), SHARDS) for p in gone}) > 1
    for p in gone:
        p.unlink()
    summaries = finish([run_cli(root, sharded, cfg, f"{i}/{SHARDS}") for i in range(SHARDS)])
    assert sum(s["files_deleted"] for s in summaries) == len(gone)
    finish([run_cli(root, clean, cfg, None)])
    got = chunk_set(sharded)
    assert got == chunk_set(clean) and {g[1] for g in got}.isdisjoint({p.relative_to(root).as_posix() for p in gone})
