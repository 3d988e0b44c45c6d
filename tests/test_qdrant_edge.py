"""Qdrant Edge store edges: data outlives the process, native filters parsed whole or refused, corrupt or foreign
folders and a folder held by another process fail with a code (no hang, no traceback), the deprecated alias."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from connectors import CollectionSpec, SearchRequest, StoreError, open_store
from connectors.qdrant_edge import QdrantEdgeStore
from tests.helpers import REPO


def rows(n: int = 20) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        v = rng.normal(size=8).astype(np.float32)
        out.append({"id": f"c{i}", "text": f"chunk {i} about harbour seals", "root": "/r", "source": f"s{i % 2}.md",
                    "chunk_index": i, "pages": [1 + i % 3], "vector": v / np.linalg.norm(v)})  # fmt: skip
    return out


def filled(path: Path) -> str:
    uri = f"qdrant+edge://{path}"
    store = open_store(uri)
    store.ensure_collection(CollectionSpec("docs", 8))
    store.upsert("docs", rows())
    store.finalize("docs")
    store.close()
    return uri


def code_of(uri: str) -> str:
    with pytest.raises(StoreError) as e:
        store = open_store(uri)
        try:
            store.count("docs")
        finally:
            store.close()
    assert "Traceback" not in e.value.message and len(e.value.message.splitlines()) == 1
    return e.value.code


def test_data_survives_reopen_and_native_filters(tmp_path: Path) -> None:
    uri = filled(tmp_path / "q")
    store = open_store(uri)
    try:
        assert isinstance(store, QdrantEdgeStore) and store.count("docs") == 20
        target = rows()[5]
        native = {"must": [{"key": "source", "match": {"value": "s1.md"}}, {"key": "chunk_index", "range": {"lt": 10}}]}
        for raw in (native, json.dumps(native)):
            hits = store.search("docs", SearchRequest(vector=target["vector"], native=raw, mode="dense", top_k=20))
            assert [h.id for h in hits][0] == "c5" and {h.id for h in hits} == {"c1", "c3", "c5", "c7", "c9"}
        either = {"should": [{"key": "pages", "match": {"any": [3]}}, {"must_not": [{"key": "source", "match": {"value": "s0.md"}}]}]}  # fmt: skip
        hits = store.search("docs", SearchRequest(vector=target["vector"], native=either, mode="dense", top_k=20))
        assert {h.id for h in hits} == {r["id"] for r in rows() if r["pages"] == [3] or r["source"] == "s1.md"}
        for bad in ("{not json", {"must": [{"key": "source"}]}, {"must": [{"key": "x", "match": {"like": "a"}}]},
                    {"filter": []}, {"must": [{"key": "n", "range": {"lt": "ten"}}]}, [], {"must": ["source"]}):  # fmt: skip
            with pytest.raises(StoreError) as e:
                store.search("docs", SearchRequest(vector=target["vector"], native=bad, mode="dense"))
            assert e.value.code == "INVALID_FILTER", bad
        with pytest.raises(StoreError) as e:
            store.search("docs", SearchRequest(vector=np.ones(5, dtype=np.float32), mode="dense"))
        assert e.value.code == "SEARCH_FAILED" and "Traceback" not in e.value.message
        with pytest.raises(StoreError) as e:
            store.ensure_collection(CollectionSpec("../escape", 8))
        assert e.value.code == "INVALID_COLLECTION"
    finally:
        store.close()


def test_corrupt_and_foreign_folders_are_refused(tmp_path: Path) -> None:
    uri = filled(tmp_path / "q")
    (tmp_path / "q" / "docs" / "edge_config.json").write_text("{garbage")
    assert code_of(uri) == "STORE_CORRUPT"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("somebody else's folder")
    assert code_of(f"qdrant+edge://{foreign}") == "STORE_INVALID"
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"], "nothing was written into it"
    marker = tmp_path / "q" / "shoal-qdrant-edge.json"
    marker.write_text("not json")
    assert code_of(uri) == "STORE_INVALID"
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert code_of(f"qdrant+edge://{blocker}") == "STORE_UNAVAILABLE"


def test_a_folder_held_by_another_process_is_refused_at_once(tmp_path: Path) -> None:
    uri = filled(tmp_path / "q")
    hold = f"from connectors import open_store; s = open_store({uri!r}); print('held', flush=True); input()"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
        start = time.monotonic()
        assert code_of(uri) == "STORE_LOCKED"
        assert time.monotonic() - start < 30, "refused, not waited on"  # a bound on a hang only
    finally:
        proc.kill()
        proc.wait()
    assert open_store(uri).count("docs") == 20  # free again once the holder is gone


def test_qdrant_local_is_a_deprecated_alias_and_old_local_mode_folders_still_open(tmp_path: Path) -> None:
    with pytest.warns(FutureWarning, match="qdrant\\+edge://"):
        store = open_store(f"qdrant+local://{tmp_path / 'new'}")
    assert isinstance(store, QdrantEdgeStore)
    store.close()
    from connectors.qdrant import QdrantStore

    legacy = QdrantStore(f"qdrant+local://{tmp_path / 'old'}")  # a folder qdrant-client's local mode wrote
    legacy.ensure_collection(CollectionSpec("docs", 8))
    legacy.upsert("docs", rows(5))
    legacy.close()
    with pytest.warns(FutureWarning, match="local-mode store"):
        old = open_store(f"qdrant+local://{tmp_path / 'old'}")
    assert isinstance(old, QdrantStore) and old.count("docs") == 5
    old.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert code_of(f"qdrant+edge://{tmp_path / 'old'}") == "STORE_INVALID"
