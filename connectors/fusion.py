"""Reciprocal-rank fusion of ranked hit lists (hybrid search in stores that do not fuse natively)."""

from __future__ import annotations

from connectors.base import Hit

RRF_K = 60


def rrf_fuse(rankings: list[list[Hit]], k: int, rrf_k: int = RRF_K) -> list[Hit]:
    """Reciprocal-rank fusion: score = sum over rankings of 1 / (rrf_k + rank)."""
    fused: dict[str, Hit] = {}
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused.setdefault(hit.id, hit)
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (rrf_k + rank)
    order = sorted(scores, key=lambda i: -scores[i])[:k]
    return [Hit(i, scores[i], fused[i].text, fused[i].metadata) for i in order]
