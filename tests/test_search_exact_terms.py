"""Hybrid search on every embedded store finds what users search for by name: a rare identifier held by one chunk
is first at top_k=1, and the answer held in a bulleted list ranks in the top 3 (tests/data/exact_terms, written
for this test: six short technical pages, one naming "the zebra-otter rule", one listing supported types)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline import PipelineConfig, Searcher, ingest_async
from tests.store_backends import store_url, unique

DOCS = Path(__file__).resolve().parent / "data" / "exact_terms"
pytestmark = pytest.mark.slow  # three ingests through the engine
RARE = "The zebra-otter rule: never share one ffi_cif between threads while preparing it."


@pytest.fixture(scope="module", params=["lancedb", "qdrant-edge", "chroma-local"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def searcher(backend: str, tmp_path: Path, request: pytest.FixtureRequest, engine: object) -> Iterator[Searcher]:
    import asyncio

    uri = store_url(backend, tmp_path, request, unique("exact"))
    summary = asyncio.run(ingest_async(DOCS, PipelineConfig(db=uri), client=engine))  # type: ignore[arg-type]
    assert summary.ok and summary.files_processed == 6
    s = Searcher(uri, client=engine)  # type: ignore[arg-type]
    yield s
    asyncio.run(s.aclose())


def run(s: Searcher, query: str, k: int) -> list[str]:
    import asyncio

    return [h.text for h in asyncio.run(s.search(query, top_k=k))]


def test_rare_identifier_first_and_list_answer_in_top_3(searcher: Searcher) -> None:
    for k in (1, 3, 10):
        texts = run(searcher, "zebra-otter rule", k)
        assert RARE in texts[0], (k, texts[:3])
    texts = run(searcher, "ffi_cif", 1)
    assert "ffi_cif" in texts[0]
    texts = run(searcher, "Which type does the decoder not handle?", 3)
    assert any("REAL is not handled" in t for t in texts), texts
