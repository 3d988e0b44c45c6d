"""The rerank tool says which scorer ordered the documents: a cross-encoder, or embedding similarity as a
fallback (no reranker configured, or the server's default reranker has no weights here); a reranker the
caller names and that has no weights is an error, never a silent fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agent_tools
from agent_tools.config import ToolSettings
from engine.errors import ModelUnavailable

DOCS = ["Bananas are yellow.", "Paris is the capital of France."]
RERANKER = "BAAI/bge-reranker-v2-m3"  # in the catalogue; no weights in an empty cache, offline


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_no_reranker_is_said_to_be_a_fallback(engine: Any) -> None:
    r = agent_tools.rerank(query="capital of France", documents=DOCS, client=engine, settings=ToolSettings())
    assert r["scorer"] == "embedding:sentence-transformers/all-MiniLM-L6-v2 (fallback: no reranker configured)"
    assert [x["index"] for x in r["results"]] == [1, 0] and r["model_calls"]["score_pairs"] == 0


def test_a_default_reranker_without_weights_falls_back_and_says_so(engine: Any, empty_cache: None) -> None:
    settings = ToolSettings(rerank_model=RERANKER)
    r = agent_tools.rerank(query="capital of France", documents=DOCS, client=engine, settings=settings)
    assert r["scorer"] == (
        f"embedding:sentence-transformers/all-MiniLM-L6-v2 (fallback: reranker '{RERANKER}' has no weights here)"
    )
    assert [x["index"] for x in r["results"]] == [1, 0]


def test_a_named_reranker_without_weights_is_an_error(engine: Any, empty_cache: None) -> None:
    with pytest.raises(ModelUnavailable, match="shoal models pull"):
        agent_tools.rerank(query="capital of France", documents=DOCS, model=RERANKER, client=engine)
