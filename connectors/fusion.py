"""Hybrid scores with one meaning on every store: reciprocal-rank fusion with one constant and one depth.

A hybrid hit's score is the sum, over the rankings the store has for the query (dense; lexical; SPLADE and
ColBERT where the store searches them), of 1 / (RRF_K + rank), rank counted from 1, each ranking cut at
CANDIDATES x top_k. A chunk first in two rankings scores 2/61 = 0.0328 on any store, so a score threshold or an
agent reading scores means the same thing whichever store answered. Stores that fuse natively are given the
same constant (Qdrant counts ranks from 0, hence QDRANT_RRF_K).
"""

from __future__ import annotations

from connectors.base import Hit

RRF_K = 60
QDRANT_RRF_K = RRF_K + 1  # Qdrant's RRF scores 1 / (k + rank) with rank counted from 0
CANDIDATES = 4  # each ranking fused is cut at CANDIDATES * top_k


def rrf_fuse(rankings: list[list[Hit]], k: int, rrf_k: int = RRF_K) -> list[Hit]:
    """Reciprocal-rank fusion: score = sum over rankings of 1 / (rrf_k + rank); ties keep first-seen order."""
    fused: dict[str, Hit] = {}
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused.setdefault(hit.id, hit)
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (rrf_k + rank)
    order = sorted(scores, key=lambda i: -scores[i])[:k]
    return [Hit(i, scores[i], fused[i].text, fused[i].metadata) for i in order]
