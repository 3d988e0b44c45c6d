"""One meaning for a hybrid score: the same query over the same chunks gives the same order and the same fused
scores (connectors/fusion.py: the convex combination of the normalised dense and keyword scores) on every store.

Chunks are 120 words long, the length shoal's own BM25 assumes (connectors/lexical.AVG_LEN), so a store's own
BM25 (LanceDB, Weaviate) and shoal's (Qdrant, Chroma) give the same normalised keyword scores."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from connectors import CollectionSpec, Hit, SearchRequest, VectorStore, lexical, open_store
from connectors.fusion import Ranking, depth, fuse
from tests.store_backends import chroma_server, store_url, unique  # noqa: F401 - chroma_server is a fixture

N, DIM, TOP = 40, 16, 10
# chunk i is the (i+1)-th nearest to the query vector; chunks 3, 7, 11, ... hold the query word, chunk 39 most often
LEXICAL = list(range(3, N, 4))
TF = {c: 1 + n for n, c in enumerate(LEXICAL)}
QUERY_WORD = "zebrafish"


def rows() -> tuple[np.ndarray, list[dict]]:
    rng = np.random.default_rng(7)
    q = rng.normal(size=DIM)
    q /= np.linalg.norm(q)
    out = []
    for i in range(N):
        u = rng.normal(size=DIM)
        u -= (u @ q) * q
        u /= np.linalg.norm(u)
        cos = 0.95 - 0.035 * i  # strictly decreasing similarity: one dense order on every store
        v = cos * q + np.sqrt(1 - cos**2) * u
        words = [QUERY_WORD] * TF.get(i, 0)
        words += [f"filler{i}x{k}" for k in range(lexical.AVG_LEN - len(words))]  # one length: BM25 orders by frequency
        out.append({
            "id": f"c{i:02d}", "text": " ".join(words), "root": "/r", "source": f"s{i % 3}.md", "chunk_index": i,
            "pages": [1], "heading_path": [], "vector": v.astype(np.float32), "entities": {}, "entity_tags": [],
        })  # fmt: skip
    return q.astype(np.float32), out


def expected() -> list[Hit]:
    q, chunks = rows()
    dense = [Hit(r["id"], float(r["vector"] @ q), r["text"]) for r in chunks]
    texts = {r["id"]: r["text"] for r in chunks}
    bm25 = lexical.bm25_scores(QUERY_WORD, texts, {QUERY_WORD: len(LEXICAL)}, N)
    text = [Hit(i, bm25[i], texts[i]) for i in sorted(bm25, key=lambda i: -bm25[i])]
    wide = depth(TOP)
    return fuse(QUERY_WORD, [Ranking("dense", dense, wide), Ranking("text", text, wide)], TOP)


@pytest.fixture(
    scope="module",
    params=["lancedb", "qdrant-edge", "qdrant-local-mode", "qdrant-server", "chroma-local", "chroma-http", "weaviate"],
)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VectorStore]:
    name = unique("hyb")
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "qdrant-local-mode":  # qdrant-client's local mode: the server connector's query path
        from connectors.qdrant import QdrantStore

        s: VectorStore = QdrantStore(f"qdrant+local://{tmp / 'legacy'}")
    else:
        s = open_store(store_url(request.param, tmp, request, name))
    s.ensure_collection(CollectionSpec(name, DIM))
    s.upsert(name, rows()[1])
    s.finalize(name)
    s.name = name  # type: ignore[attr-defined]
    yield s
    s.drop_collection(name)
    s.close()


def test_expected_ranking_has_no_ties() -> None:
    scores = [h.score for h in expected()]
    assert all(a - b > 3e-3 for a, b in zip(scores, scores[1:], strict=False)), scores
    top = expected()[0]  # c07: 8th nearest and 9th by word frequency, beating c00 (nearest, no query word)
    assert top.id == "c07" and 0.5 < top.score < 1.0


def test_same_query_same_order_and_scores_on_every_store(store: VectorStore) -> None:
    q, _ = rows()
    hits = store.search(store.name, SearchRequest(vector=q, text=QUERY_WORD, mode="hybrid", top_k=TOP))  # type: ignore[attr-defined]
    want = expected()
    assert [h.id for h in hits] == [h.id for h in want]
    np.testing.assert_allclose([h.score for h in hits], [h.score for h in want], atol=0.01)
