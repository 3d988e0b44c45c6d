"""The LanceDB connector against a real embedded LanceDB: upserts, deletes, filters, FTS, RRF hybrid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from connectors import CollectionSpec, Hit, SearchRequest, StoreError, open_store
from connectors.filters import parse
from connectors.lancedb import LanceDBStore, rrf_fuse

DIM = 8


def unit(i: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[i % DIM] = 1.0
    return v


def row(i: int, text: str, source: str = "a.md", **extra) -> dict:
    return {"id": f"id-{i}", "text": text, "root": "/r", "source": source, "chunk_index": i, "vector": unit(i), **extra}


@pytest.fixture
def store(tmp_path: Path) -> LanceDBStore:
    s = open_store(f"lancedb://{tmp_path / 'db'}")
    assert isinstance(s, LanceDBStore)
    s.ensure_collection(CollectionSpec("c", DIM, entities=True))
    return s


def test_upsert_is_idempotent_and_replaces(store: LanceDBStore) -> None:
    rows = [row(i, f"text {i}") for i in range(5)]
    store.upsert("c", rows)
    store.upsert("c", rows)
    assert store.count("c") == 5
    store.upsert("c", [row(2, "changed text")])
    assert store.count("c") == 5
    assert {r["id"]: r["text"] for r in store.rows("c", ["id", "text"])}["id-2"] == "changed text"
    assert store.delete("c", ["id-1", "id-3", "missing"]) == 2
    assert store.ids_where("c", parse("root=/r")) == {"id-0", "id-2", "id-4"}


def test_dense_search_with_filters_and_entities(store: LanceDBStore) -> None:
    store.upsert(
        "c",
        [
            row(0, "alpha", "a.md", entities={"org": ["Acme"]}, entity_tags=["org:Acme"]),
            row(1, "beta", "b.md", entities={"org": ["Beta Ltd"], "person": ["Ann"]}, entity_tags=["org:Beta Ltd", "person:Ann"]),
            row(2, "gamma", "b.md", entities={}, entity_tags=[]),
        ],
    )  # fmt: skip
    hits = store.search("c", SearchRequest(vector=unit(1), mode="dense", top_k=3))
    assert hits[0].id == "id-1" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[0].metadata["entities"] == {"org": ["Beta Ltd"], "person": ["Ann"]}
    hits = store.search("c", SearchRequest(vector=unit(1), native="source = 'a.md'", mode="dense", top_k=3))
    assert [h.id for h in hits] == ["id-0"]
    hits = store.search("c", SearchRequest(vector=unit(0), where=parse("entity:person=Ann"), mode="dense"))
    assert [h.id for h in hits] == ["id-1"]
    hits = store.search("c", SearchRequest(vector=unit(0), native="array_has(map_extract(entities, 'org')[1], 'Acme')"))
    assert [h.id for h in hits] == ["id-0"]


def test_full_text_and_hybrid(store: LanceDBStore) -> None:
    store.upsert("c", [row(i, f"ordinary sentence number {i} about pumps") for i in range(10)])
    store.upsert("c", [row(10, "error E-417 means the impeller is blocked")])
    store.finalize("c")
    assert any(ix.columns == ["text"] for ix in store._table("c").list_indices())
    text = store.search("c", SearchRequest(text="E-417", mode="text", top_k=3))
    assert text[0].id == "id-10"
    # the vector points elsewhere; hybrid still brings the exact identifier to the top
    hybrid = store.search("c", SearchRequest(vector=unit(3), text="E-417", mode="hybrid", top_k=3))
    assert hybrid[0].id in {"id-10", "id-3"} and "id-10" in [h.id for h in hybrid[:2]]
    # rows added after the index are still found (unindexed rows are searched too)
    store.upsert("c", [row(11, "valve V-88 leaks")])
    assert store.search("c", SearchRequest(text="V-88", mode="text", top_k=1))[0].id == "id-11"
    v = store.version("c")
    store.finalize("c", changed=False)
    assert store.version("c") == v, "an unchanged store is not rewritten"


def test_rrf_fusion_math() -> None:
    a = [Hit("x", 0.9, "x"), Hit("y", 0.8, "y")]
    b = [Hit("y", 5.0, "y"), Hit("z", 4.0, "z")]
    fused = rrf_fuse([a, b], 3)
    assert [h.id for h in fused] == ["y", "x", "z"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)


def test_schema_mismatch_and_unknown_store(tmp_path: Path, store: LanceDBStore) -> None:
    other = open_store(str(tmp_path / "db"))
    with pytest.raises(StoreError, match="another layout"):
        other.ensure_collection(CollectionSpec("c", DIM * 2))
    with pytest.raises(StoreError, match="unknown store"):
        open_store("mongo://localhost:27017/x")
    with pytest.raises(StoreError, match="sparse"):
        store.search("c", SearchRequest(sparse={"indices": [1], "values": [1.0]}, mode="sparse"))


def test_multivector_and_sparse_columns(tmp_path: Path) -> None:
    s = open_store(f"lancedb://{tmp_path / 'mv'}")
    s.ensure_collection(CollectionSpec("m", DIM, multivector_dim=4, sparse=True, classes=True))
    rng = np.random.default_rng(0)
    rows = []
    for i in range(6):
        mv = rng.normal(size=(3 + i, 4)).astype(np.float32)
        mv /= np.linalg.norm(mv, axis=1, keepdims=True)
        rows.append(
            row(i, f"t{i}", multivector=mv, sparse={"indices": [i, 100 + i], "values": [1.0, 0.5]}, classes=["x"])
        )
    s.upsert("m", rows)
    got = {r["id"]: r for r in s.rows("m", ["id", "multivector", "sparse"])}
    assert len(got["id-2"]["multivector"]) == 5 and got["id-2"]["sparse"] == {"indices": [2, 102], "values": [1.0, 0.5]}
    hits = s.search("m", SearchRequest(multivector=rows[4]["multivector"], mode="multivector", top_k=2))
    assert hits[0].id == "id-4", "MaxSim of a document's own token vectors is the best match"


def test_a_large_table_gets_an_ivf_sq_index_that_finds_stored_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import connectors.lancedb as lance_connector

    monkeypatch.setattr(lance_connector, "VECTOR_INDEX_MIN_ROWS", 4096)  # the index at a test's size
    dim, n = 64, 4096
    vectors = np.random.default_rng(3).normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    s = open_store(f"lancedb://{tmp_path / 'db'}")
    s.ensure_collection(CollectionSpec("big", dim))
    s.upsert("big", [{"id": f"id-{i}", "text": f"t{i}", "root": "/r", "source": "a.md", "chunk_index": i,
                      "vector": vectors[i]} for i in range(n)])  # fmt: skip
    s.finalize("big")
    assert isinstance(s, LanceDBStore)
    kinds = {tuple(ix.columns): ix.index_type for ix in s._table("big").list_indices()}
    assert str(kinds[("vector",)]) == "IvfSq"
    found = sum(
        s.search("big", SearchRequest(vector=vectors[i], mode="dense", top_k=1))[0].id == f"id-{i}"
        for i in range(0, n, 128)
    )
    assert found >= 30  # of 32: each stored vector is its own nearest neighbour through the index


def test_upserts_append_new_ids_and_replace_stored_ones_indexed_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import connectors.lancedb as lance_connector

    monkeypatch.setattr(lance_connector, "SCALAR_INDEX_MIN_ROWS", 10)  # the id index at a test's size
    s = open_store(f"lancedb://{tmp_path / 'db'}")
    s.ensure_collection(CollectionSpec("c", DIM))
    s.upsert("c", [row(i, f"first {i}") for i in range(30)])  # an empty table: appended
    s.upsert("c", [row(i, f"first {i}") for i in range(30, 50)])  # the id index is built, then these appended
    assert isinstance(s, LanceDBStore)
    assert ("id",) in {tuple(ix.columns) for ix in s._table("c").list_indices()}
    s.upsert("c", [row(i, f"second {i}") for i in range(40, 60)])  # 40-49 stored past the index, 50-59 new
    s.upsert("c", [row(i, f"second {i}") for i in range(10)])  # stored and indexed
    s.upsert("c", [row(70, "a"), row(5, "x"), row(70, "b"), row(5, "y")])  # the same id twice: the later row
    texts = {r["id"]: r["text"] for r in s.rows("c", ["id", "text"])}
    assert s.count("c") == len(texts) == 61
    assert all(texts[f"id-{i}"] == f"second {i}" for i in [*range(1, 5), *range(6, 10), *range(40, 60)])
    assert all(texts[f"id-{i}"] == f"first {i}" for i in range(10, 40))
    assert (texts["id-5"], texts["id-70"]) == ("y", "b")
    s.upsert("c", [row(i, f"second {i}") for i in range(40, 60)])  # a retry of a write that went through
    assert s.count("c") == 61
