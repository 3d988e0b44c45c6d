"""Incremental index maintenance: a small change is answered beside the indexes, a big one added to them, a
rebuild trains them again; every step says which index answers, and searches find the re-written chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import connectors.lancedb as lance_mod
from connectors import CollectionSpec, SearchRequest, open_store
from connectors.base import Maintenance

DIM = 32


def rows(n: int, seed: int, text: str = "alpha beta") -> list[dict]:
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return [
        {"id": f"c{i:05d}", "text": f"{text} {i}", "root": "/r", "source": f"d{i // 10}.md", "chunk_index": i % 10,
         "vector": vecs[i]}
        for i in range(n)
    ]  # fmt: skip


def state(m: Maintenance, name: str) -> tuple[int, int]:
    s = next(i for i in m.indexes if i.name == name)
    return s.indexed, s.unindexed


def test_lancedb_small_change_is_scanned_big_change_indexed_rebuild_retrains(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(lance_mod, "VECTOR_INDEX_MIN_ROWS", 1000)
    store = open_store(f"lancedb://{tmp_path}")
    store.ensure_collection(CollectionSpec("c", DIM))
    base = rows(3000, 0)
    store.upsert("c", base)
    first = store.finalize("c")
    assert first.action == "built" and state(first, "vector") == (3000, 0)
    assert "IVF" in next(i.kind for i in first.indexes if i.name == "vector")

    fresh = rows(3000, 1, "zebracorn")[:60]  # same ids, new text and vectors
    store.upsert("c", fresh)
    small = store.finalize("c")
    assert small.action == "incremental" and state(small, "vector") == (2940, 60)  # the 60 by exact scan
    assert store.count("c") == 3000
    hits = store.search("c", SearchRequest(text="zebracorn", mode="text", top_k=100))
    assert sorted(h.id for h in hits) == sorted(r["id"] for r in fresh)
    top = store.search("c", SearchRequest(vector=fresh[7]["vector"], mode="dense", top_k=3))
    assert top[0].id == fresh[7]["id"] and top[0].text.startswith("zebracorn")
    assert [h.id for h in top].count(fresh[7]["id"]) == 1  # the old row is gone, not shadowed

    store.upsert("c", rows(3000, 2, "gamma")[:600])  # 20% of the table: past the threshold
    big = store.finalize("c")
    assert big.action in ("incremental", "compacted") and state(big, "vector")[1] == 0
    again = store.finalize("c", rebuild=True)
    assert again.action == "rebuilt" and state(again, "vector") == (3000, 0) and store.count("c") == 3000
    assert "vector IVF" in again.describe()


def test_lancedb_compacts_only_past_the_fragment_threshold(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(lance_mod, "SMALL_FRAGMENTS_MAX", 4)
    store = open_store(f"lancedb://{tmp_path}")
    store.ensure_collection(CollectionSpec("c", DIM))
    base = rows(2000, 0)
    store.upsert("c", base)
    assert store.finalize("c").action == "built"
    store.upsert("c", base[:10])
    assert store.finalize("c").action == "incremental"
    for i in range(6):  # six more small fragments
        store.upsert("c", base[100 * i : 100 * i + 10])
    assert store.finalize("c").action == "compacted"
    assert store.count("c") == 2000 and store.finalize("c", changed=False).action == "none"


def test_edge_finalize_keeps_the_graph_and_reports_it(tmp_path: Path) -> None:
    store = open_store(f"qdrant+edge://{tmp_path}")
    try:
        store.ensure_collection(CollectionSpec("c", DIM))
        store.upsert("c", rows(1500, 0))
        first = store.finalize("c")
        assert first.indexes and first.indexes[0].name == "dense" and "HNSW" in first.indexes[0].kind
        fresh = rows(1500, 1, "zebracorn")[:40]
        store.upsert("c", fresh)
        after = store.finalize("c")
        assert sum(state(after, "dense")) == 1500 and store.count("c") == 1500
        top = store.search("c", SearchRequest(vector=fresh[3]["vector"], mode="dense", top_k=1))
        assert top[0].id == fresh[3]["id"] and top[0].text.startswith("zebracorn")
        rebuilt = store.finalize("c", rebuild=True)
        assert rebuilt.action == "rebuilt" and store.count("c") == 1500
        top = store.search("c", SearchRequest(vector=fresh[5]["vector"], mode="dense", top_k=1))
        assert top[0].id == fresh[5]["id"]
    finally:
        store.close()


def test_edge_memory_setting_is_checked_and_disk_mode_searches(tmp_path: Path) -> None:
    from connectors.base import StoreError

    with pytest.raises(StoreError) as e:
        open_store(f"qdrant+edge://{tmp_path / 'x'}?memory=tiny")
    assert e.value.code == "INVALID_URL" and "memory=disk" in e.value.message
    store = open_store(f"qdrant+edge://{tmp_path / 'd'}?memory=disk")
    try:
        store.ensure_collection(CollectionSpec("c", DIM))
        data = rows(1200, 0)
        store.upsert("c", data)
        assert "HNSW" in store.finalize("c").indexes[0].kind
        top = store.search("c", SearchRequest(vector=data[9]["vector"], mode="dense", top_k=1))
        assert top[0].id == data[9]["id"]
    finally:
        store.close()
