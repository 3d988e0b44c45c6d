"""Retrieval quality per store: the 23-question set over examples/docs ingested into each backend;
answer-bearing chunk at rank 1 / in the top 3 for dense and hybrid; each store's hybrid is no worse."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import shoal
from connectors import open_store
from pipeline import ingest, search
from pipeline.config import ChunkConfig, PipelineConfig
from tests.store_backends import chroma_server, store_url, unique  # noqa: F401 - chroma_server is a fixture
from tests.test_ingest_retrieval import DOCS, QUESTIONS, _rank

RESULTS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    with shoal.Engine() as e:
        yield e


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["lancedb", "qdrant-edge", "qdrant-server", "chroma-local", "chroma-http", "weaviate"])  # fmt: skip
def test_hybrid_not_worse_than_dense_on_each_store(backend: str, tmp_path: Path, request, engine) -> None:
    coll = unique("qa")
    uri = store_url(backend, tmp_path, request, coll)
    cfg = PipelineConfig(db=uri, collection=coll, chunking=ChunkConfig(target_tokens=80, overlap_tokens=16))
    summary = ingest(DOCS, cfg, client=engine)
    assert summary.ok and summary.files_processed == 6
    report = {"dense": {"top1": 0, "top3": 0}, "hybrid": {"top1": 0, "top3": 0}}
    misses = []
    for question, answer in QUESTIONS:
        for mode in ("dense", "hybrid"):
            rank = _rank(search(question, db=uri, collection=coll, top_k=3, mode=mode, client=engine), answer)
            report[mode]["top1"] += rank == 1
            report[mode]["top3"] += rank is not None
            if rank != 1:
                misses.append((mode, question, rank))
    n = len(QUESTIONS)
    RESULTS[backend] = report
    print(f"\n{backend}: {summary.chunks_written} chunks, {n} questions")
    for mode, r in report.items():
        print(f"  {mode:7s} top-1 {r['top1']}/{n} ({r['top1'] / n:.0%})  top-3 {r['top3']}/{n} ({r['top3'] / n:.0%})")
    for m in misses:
        print("  miss:", m)
    print(json.dumps({backend: report}))
    store = open_store(uri)
    try:
        store.drop_collection(coll)
    finally:
        store.close()
    assert report["hybrid"]["top1"] >= report["dense"]["top1"]
    assert report["hybrid"]["top3"] >= report["dense"]["top3"]
    assert report["hybrid"]["top3"] >= 0.85 * n, "hybrid should find most answers in its top 3"
