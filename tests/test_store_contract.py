"""One contract for every vector store available in the run (LanceDB, Qdrant local, Chroma local and HTTP,
a Qdrant server or Weaviate when their URL is set): 1,000 chunks, idempotent upserts, portable filters
checked against a reference evaluation, delete by source, best match first, management operations."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from connectors import CollectionSpec, SearchRequest, StoreError, VectorStore, open_store
from connectors.base import delete_source
from connectors.filters import And, Or, matches, parse
from tests.store_backends import BACKENDS, chroma_server, store_url, unique  # noqa: F401 - chroma_server is a fixture

N, DIM, MV_DIM = 1000, 32, 8
FILTERS = [
    "source=s3.md",
    "source!=s3.md",
    "source=s1.md|s2.md",
    "chunk_index>=990",
    "chunk_index<5",
    "n_tokens<=12",
    "entity:org=Acme",
    "entity:org!=Acme",
    "entity:org=Acme|Beta",
    "heading_path=S2",
    "pages=3",
    "id=chunk-0042",
    ["source=s1.md", "entity:org=Acme"],
    {"or": [{"field": "entity:person", "value": "Ann"}, {"field": "chunk_index", "op": "lt", "value": 3}]},
    {"and": [{"or": [{"field": "source", "value": "s0.md"}, {"field": "source", "value": "s9.md"}]},
             {"field": "pages", "op": "ne", "value": 1}]},
]  # fmt: skip


def make_rows(n: int = N, seed: int = 0, caps=None) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        v = rng.normal(size=DIM).astype(np.float32)
        ents: dict[str, list[str]] = {}
        if i % 7 == 0:
            ents.setdefault("org", []).append("Acme")
        if i % 11 == 0:
            ents.setdefault("org", []).append("Beta")
        if i % 13 == 0:
            ents["person"] = ["Ann"]
        row = {
            "id": f"chunk-{i:04d}", "text": f"passage {i} mentions the code q{i:04d}x among ordinary harbour words",
            "root": "/corpus", "source": f"s{i % 10}.md", "title": f"Doc {i % 10}", "kind": "markdown",
            "chunk_index": i, "chunk_hash": f"h{i}", "doc_hash": f"d{i % 10}", "pages": [i % 5 + 1],
            "heading_path": ["Part", f"S{i % 4}"], "char_start": i * 10, "char_end": i * 10 + 9,
            "n_tokens": 10 + i % 50, "ingested_at": 1.0, "vector": v / np.linalg.norm(v),
            "entities": ents, "entity_tags": sorted(f"{k}:{t}" for k, vs in ents.items() for t in vs),
        }  # fmt: skip
        if caps is None or caps.sparse:
            row["sparse"] = {"indices": [i, 5000 + i % 10], "values": [1.0, 0.2]}
        if caps is None or caps.multivector:
            mv = rng.normal(size=(3 + i % 3, MV_DIM)).astype(np.float32)
            row["multivector"] = mv / np.linalg.norm(mv, axis=1, keepdims=True)
        rows.append(row)
    return rows


def spec_for(store: VectorStore, name: str) -> CollectionSpec:
    caps = store.capabilities
    return CollectionSpec(name, DIM, multivector_dim=MV_DIM if caps.multivector else None, sparse=caps.sparse, entities=True)  # fmt: skip


@pytest.fixture(scope="module", params=BACKENDS)
def loaded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """A store with a 1,000-chunk collection written twice (the second upsert must not duplicate)."""
    name = unique()
    uri = store_url(request.param, tmp_path_factory.mktemp(request.param), request, name)
    store = open_store(uri)
    store.ensure_collection(spec_for(store, name))
    rows = make_rows(caps=store.capabilities)
    assert store.upsert(name, rows) == N
    assert store.upsert(name, rows) == N
    store.finalize(name)
    yield request.param, store, name, rows
    store.drop_collection(name)
    store.close()


def test_upsert_twice_holds_each_chunk_once(loaded) -> None:
    _, store, name, rows = loaded
    assert store.count(name) == N
    stored = store.rows(name, ["source", "chunk_index"])
    ids = [r["id"] for r in stored]
    assert len(ids) == N and set(ids) == {r["id"] for r in rows}
    got = {r["id"]: r["chunk_index"] for r in stored}
    assert all(got[r["id"]] == r["chunk_index"] for r in rows)
    assert {(s.root, s.source): s.chunks for s in store.sources(name)} == {
        ("/corpus", f"s{i}.md"): 100 for i in range(10)
    }
    assert name in store.list_collections()


@pytest.mark.parametrize("where", FILTERS, ids=[str(f)[:40] for f in FILTERS])
def test_portable_filters_match_the_reference(loaded, where) -> None:
    _, store, name, rows = loaded
    flt = parse(where)
    want = {r["id"] for r in rows if matches(flt, r)}
    assert want, "every filter in the suite selects something"
    assert store.ids_where(name, flt) == want
    assert store.count(name, flt) == len(want)


def test_filtered_search_and_known_best_match_first(loaded) -> None:
    backend, store, name, rows = loaded
    target = rows[91]  # 91 = 7 * 13: entities org Acme and person Ann
    hits = store.search(name, SearchRequest(vector=target["vector"], mode="dense", top_k=5))
    assert hits[0].id == target["id"] and hits[0].score == pytest.approx(1.0, abs=1e-3)
    assert hits[0].metadata["source"] == target["source"] and hits[0].text == target["text"]
    assert hits[0].metadata["entities"] == {"org": ["Acme"], "person": ["Ann"]} == target["entities"]
    text = store.search(name, SearchRequest(text="q0777x", mode="text", top_k=3))
    assert text[0].id == "chunk-0777"
    # the vector points at 91, the words at 777: hybrid ranks both in its top 2
    hybrid = store.search(name, SearchRequest(vector=target["vector"], text="q0777x", mode="hybrid", top_k=5))
    assert {h.id for h in hybrid[:2]} == {"chunk-0091", "chunk-0777"}
    flt = parse("entity:org=Acme")
    hits = store.search(name, SearchRequest(vector=target["vector"], where=flt, mode="dense", top_k=10))
    assert len(hits) == 10 and all("org:Acme" in h.metadata["entity_tags"] for h in hits)
    hits = store.search(name, SearchRequest(vector=target["vector"], text="q0777x", where=flt, top_k=10))
    assert hits and all("org:Acme" in h.metadata["entity_tags"] for h in hits)
    assert "chunk-0777" in {h.id for h in hits}, "777 is a multiple of 7: it passes the filter"


def test_sparse_and_multivector_where_supported(loaded) -> None:
    _, store, name, rows = loaded
    caps = store.capabilities
    if caps.sparse_search:
        hits = store.search(name, SearchRequest(sparse={"indices": [321], "values": [1.0]}, mode="sparse", top_k=3))
        assert hits[0].id == "chunk-0321"
    if caps.multivector:
        hits = store.search(name, SearchRequest(multivector=rows[456]["multivector"], mode="multivector", top_k=3))
        assert hits[0].id == "chunk-0456", "MaxSim of a chunk's own token vectors ranks it first"
    if not caps.sparse_search:
        with pytest.raises(StoreError):
            store.search(name, SearchRequest(sparse={"indices": [1], "values": [1.0]}, mode="sparse"))


def test_schema_mismatch_is_refused(loaded) -> None:
    _, store, name, _ = loaded
    with pytest.raises(StoreError, match="another layout") as e:
        store.ensure_collection(CollectionSpec(name, DIM * 2, entities=True))
    assert e.value.code == "SCHEMA_MISMATCH"


def test_state_table_round_trip(loaded) -> None:
    _, store, name, _ = loaded
    table = store.state_table()
    docs = {
        f"source:{name}:/p/{i}": {"kind": "source", "collection": name, "root": f"/r{i % 2}", "n": i} for i in range(5)
    }
    table.put(docs)
    table.put({f"source:{name}:/p/0": {**docs[f"source:{name}:/p/0"], "n": 99}})
    assert table.get([f"source:{name}:/p/0", "nope"]) == {
        f"source:{name}:/p/0": {**docs[f"source:{name}:/p/0"], "n": 99}
    }
    assert set(table.scan("source", name)) == set(docs)
    assert set(table.scan("source", name, "/r1")) == {f"source:{name}:/p/1", f"source:{name}:/p/3"}
    table.delete([f"source:{name}:/p/{i}" for i in range(5)])
    assert table.scan("source", name) == {}
    assert not any(c.startswith("shoal_state") for c in store.list_collections())


def test_delete_by_ids_and_by_source(loaded) -> None:
    _, store, name, rows = loaded
    assert store.delete(name, ["chunk-0001", "chunk-0002", "missing"]) == 2
    assert store.delete_where(name, parse("source=s3.md")) == 100
    assert delete_source(store, name, "s4.md", root="/elsewhere") == 0
    assert delete_source(store, name, "s4.md", root="/corpus") == 100
    assert store.count(name) == N - 202
    counts = {s.source: s.chunks for s in store.sources(name)}
    assert "s3.md" not in counts and "s4.md" not in counts and counts["s1.md"] == 99 and counts["s2.md"] == 99
    assert store.search(name, SearchRequest(vector=rows[13]["vector"], mode="dense", top_k=1))[0].id != "chunk-0013"
    assert Counter(r["source"] for r in store.rows(name, ["source"]))["s3.md"] == 0


def test_drop_collection(loaded) -> None:
    _, store, name, _ = loaded
    other = unique("drop")
    store.ensure_collection(CollectionSpec(other, DIM))
    store.upsert(other, make_rows(3, caps=store.capabilities)[:3])
    assert other in store.list_collections()
    assert store.drop_collection(other) and other not in store.list_collections()
    assert not store.drop_collection(other)
    with pytest.raises(StoreError) as e:
        store.count(other)
    assert e.value.code == "NO_COLLECTION"


def test_and_or_objects_are_accepted(loaded) -> None:
    _, store, name, rows = loaded
    flt = Or((And((parse("source=s5.md"), parse("chunk_index<100"))), parse("id=chunk-0999")))
    assert store.ids_where(name, flt) == {r["id"] for r in rows if matches(flt, r)} == {"chunk-0005", "chunk-0015", "chunk-0025", "chunk-0035", "chunk-0045", "chunk-0055", "chunk-0065", "chunk-0075", "chunk-0085", "chunk-0095", "chunk-0999"}  # fmt: skip


@pytest.mark.slow
def test_unknown_scheme_and_unreachable_servers_fail_fast(tmp_path: Path) -> None:
    from tests.helpers import free_port

    with pytest.raises(StoreError) as e:
        open_store("mongo://localhost:1/x")
    assert e.value.code == "UNKNOWN_STORE" and "qdrant://" in e.value.message
    port = free_port()
    for uri in (f"qdrant://127.0.0.1:{port}/c", f"chroma://127.0.0.1:{port}/ccc", f"weaviate://127.0.0.1:{port}/C"):
        with pytest.raises(StoreError) as e:
            open_store(uri)
        assert e.value.code == "STORE_UNREACHABLE" and f"127.0.0.1:{port}" in e.value.message
