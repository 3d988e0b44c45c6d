"""Idempotent ingest into every store: a connector error in the middle of a batch, then a retry, leaves
exactly a clean run's chunks; SIGKILL of an ingest into Qdrant local and Chroma, then a re-run, too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import shoal
from connectors import StoreError, open_store
from connectors.registry import DRIVERS, parse_url
from pipeline import ingest
from pipeline.config import ChunkConfig, EngineConfig, PipelineConfig
from pipeline.manifest import Manifest
from tests.corpus import make_corpus
from tests.store_backends import chroma_server, store_url, unique  # noqa: F401 - chroma_server is a fixture

N_DOCS = 12


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    with shoal.Engine() as e:
        yield e


def small_config(uri: str, coll: str) -> PipelineConfig:
    return PipelineConfig(
        db=uri, collection=coll, chunking=ChunkConfig(target_tokens=48, overlap_tokens=8), files_in_flight=2,
        write_batch_rows=8, engine=EngineConfig(batch_size=8, in_flight=1),
    )  # fmt: skip


def chunk_set(uri: str, coll: str) -> list[tuple]:
    store = open_store(uri)
    try:
        rows = store.rows(coll, ["source", "chunk_index", "chunk_hash"])
    finally:
        store.close()
    return sorted((r["id"], r["source"], r["chunk_index"], r["chunk_hash"]) for r in rows)


def store_class(uri: str) -> type:
    import importlib

    module, cls, _ = DRIVERS[parse_url(uri).scheme]
    return getattr(importlib.import_module(module), cls)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["lancedb", "qdrant-edge", "chroma-local", "chroma-http", "weaviate"])
def test_error_mid_batch_then_retry_leaves_exactly_the_intended_chunks(
    backend, tmp_path: Path, request, engine, monkeypatch
) -> None:
    root = tmp_path / "docs"
    make_corpus(root, N_DOCS, seed=3)
    coll, clean_coll = unique("flaky"), unique("clean")
    uri = store_url(backend, tmp_path, request, coll)
    cls = store_class(uri)
    real_upsert = cls.upsert
    calls = {"n": 0}

    def flaky_upsert(self, collection, rows):
        calls["n"] += 1
        if calls["n"] == 2:  # the second write lands half its rows, then the connector fails
            real_upsert(self, collection, rows[: len(rows) // 2])
            raise StoreError("injected failure in the middle of a batch", code="INJECTED")
        return real_upsert(self, collection, rows)

    monkeypatch.setattr(cls, "upsert", flaky_upsert)
    first = ingest(root, small_config(uri, coll), client=engine)
    assert calls["n"] >= 3 and first.files_failed
    assert all("store write failed" in f.reason for f in first.files_failed)
    monkeypatch.setattr(cls, "upsert", real_upsert)

    retry = ingest(root, small_config(uri, coll), client=engine)
    assert retry.ok and retry.files_processed == len(first.files_failed)
    assert retry.files_unchanged == N_DOCS - len(first.files_failed)
    clean_uri = uri.replace(coll, clean_coll) if parse_url(uri).collection else uri
    clean = ingest(root, small_config(clean_uri, clean_coll), client=engine)
    assert clean.ok and clean.files_processed == N_DOCS
    got, want = chunk_set(uri, coll), chunk_set(clean_uri, clean_coll)
    assert len({g[0] for g in got}) == len(got), "no duplicates"
    assert got == want, "exactly the chunks of a clean run: none missing, none extra"
    store = open_store(uri)
    try:
        store.drop_collection(coll)
        store.drop_collection(clean_coll)
    finally:
        store.close()


CONFIG = """
chunking: {target_tokens: 48, overlap_tokens: 8}
files_in_flight: 2
write_batch_rows: 8
engine: {batch_size: 8, in_flight: 1}
"""


def run_cli(root: Path, uri: str, cfg: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-c", "from shoal.cli import app; app()", "ingest", str(root), "--db", uri]
    return subprocess.Popen(
        [*cmd, "--config", str(cfg), "-q", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def committed(folder: Path) -> int:
    path = folder / "manifest.sqlite"
    if not path.exists():
        return 0
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as c:
            return c.execute("SELECT count(*) FROM sources WHERE status = 'ok'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["qdrant+edge", "chroma+local"])
def test_sigkill_mid_ingest_then_rerun_equals_clean_run(scheme: str, tmp_path: Path) -> None:
    n_docs = 32
    root = tmp_path / "docs"
    make_corpus(root, n_docs, seed=11)
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(CONFIG)
    crashed, clean = tmp_path / "crashed", tmp_path / "clean"

    proc = run_cli(root, f"{scheme}://{crashed}", cfg)
    deadline = time.monotonic() + 300  # a bound on a hang, not a performance threshold
    while committed(crashed) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_at_kill = committed(crashed)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert 3 <= done_at_kill < n_docs, "the kill landed mid-run"

    resumed = run_cli(root, f"{scheme}://{crashed}", cfg)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err.decode()[-2000:]
    summary = json.loads(out.decode().strip().splitlines()[-1])
    assert summary["files_unchanged"] == done_at_kill and summary["files_processed"] == n_docs - done_at_kill

    fresh = run_cli(root, f"{scheme}://{clean}", cfg)
    _, err = fresh.communicate(timeout=600)
    assert fresh.returncode == 0, err.decode()[-2000:]
    got, want = chunk_set(f"{scheme}://{crashed}", "chunks"), chunk_set(f"{scheme}://{clean}", "chunks")
    assert len({g[0] for g in got}) == len(got), "no duplicates"
    assert got == want, "exactly the chunks of a clean run: none missing, none extra"
    assert len({g[1] for g in got}) == n_docs
    manifest = Manifest(crashed / "manifest.sqlite")
    assert all(not r.pending_ids and r.status == "ok" for r in manifest.sources("chunks").values())
    manifest.close()
