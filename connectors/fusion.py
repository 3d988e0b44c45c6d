"""Hybrid scores with one meaning on every store: a convex combination of normalised scores, rare terms first.

Every store answers a hybrid search with its rankings (dense; its keyword ranking; SPLADE and ColBERT where it
searches them), each cut at `depth(top_k)` candidates, and `fuse` combines them here, so the score means the
same whichever store answered (Bruch, Gai and Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval",
ACM TOIS 2023, found this combination better than reciprocal-rank fusion in and out of domain):

- each ranking's scores are normalised to [0, 1] by its theoretical minimum (-1 for a cosine, 0 for a keyword,
  SPLADE or MaxSim score) and the best score it returned; a chunk a ranking did not return counts as that
  ranking's lowest returned score (0 when the ranking ended before its depth: nothing else matched);
- fused = DENSE_WEIGHT x (mean of the semantic rankings) + (1 - DENSE_WEIGHT) x keyword;
- a query's rare terms are its words held verbatim by 1 to RARE_SHARE of the candidates (an identifier, an
  error code, a product name); a chunk holding every one of them scores 1 + fused, so it is never outranked by
  a chunk holding none. A hybrid score is therefore in [0, 2]: above 1 means "holds every rare query term".

DENSE_WEIGHT, CANDIDATE_DEPTH and RARE_SHARE were chosen on the CISI collection only (bench/retrieval_tune.py: the
best mean nDCG@10 over LanceDB, Qdrant Edge and Chroma among the settings whose known-item top-1 is within 0.05 of
the best; 0.7, the grid's highest weight, led at every depth (higher ones were not tried), and the rare-term signal lifted LanceDB's known-item top-1 from 0.61 to
0.85) and reported on the others (bench/retrieval.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from connectors.base import Hit
from connectors.lexical import STOPWORDS

Kind = Literal["dense", "text", "sparse", "multivector"]
DENSE_WEIGHT = 0.7
CANDIDATE_DEPTH = 100  # candidates taken from each ranking (at least top_k)
RARE_SHARE = 0.01  # a query word held by at most this share of the candidates (and at least 1) is rare
RRF_K = 60  # reciprocal-rank fusion's constant (the former fusion; kept for callers that rank by RRF)
_FLOOR: dict[Kind, float] = {"dense": -1.0, "text": 0.0, "sparse": 0.0, "multivector": 0.0}
_WORD = re.compile(r"\w+(?:[-./']\w+)*")


def depth(top_k: int) -> int:
    """How many candidates each ranking gives the fusion for a search of top_k."""
    return max(CANDIDATE_DEPTH, top_k)


@dataclass
class Ranking:
    """One ranking a store returned: what it ranks by, its hits (best first) and how deep it was asked to go."""

    kind: Kind
    hits: list[Hit]
    asked: int


def _normalised(r: Ranking) -> tuple[dict[str, float], float]:
    """Each hit's normalised score, and the score of a chunk the ranking did not return."""
    if not r.hits:
        return {}, 0.0
    top = max(h.score for h in r.hits)
    floor = min(_FLOOR[r.kind], min(h.score for h in r.hits))
    span = top - floor
    norm = {h.id: (h.score - floor) / span if span > 0 else 1.0 for h in r.hits}
    missing = 0.0 if len(r.hits) < r.asked else min(norm.values())
    return norm, missing


def _holders(words: list[str], lowered: Sequence[str]) -> dict[str, set[int]]:
    """For each word, the texts (by index) holding it as a whole word: a substring test, then a regex on those."""
    out: dict[str, set[int]] = {}
    for w in words:
        pattern = re.compile(rf"\b{re.escape(w)}\b")
        out[w] = {i for i, t in enumerate(lowered) if w in t and pattern.search(t)}
    return out


def _rare(query: str, lowered: Sequence[str], share: float) -> dict[str, set[int]]:
    words = [w for w in dict.fromkeys(_WORD.findall(query.lower())) if w not in STOPWORDS]
    limit = max(1, int(share * len(lowered)))
    return {w: held for w, held in _holders(words, lowered).items() if 0 < len(held) <= limit}


def rare_words(query: str, texts: Sequence[str], share: float = RARE_SHARE) -> list[str]:
    """The query's words held verbatim (case-insensitive, whole words) by at least one and at most `share` of
    the texts."""
    return list(_rare(query, [t.lower() for t in texts], share))


def fuse(query: str, rankings: Sequence[Ranking], k: int, *, weight: float = DENSE_WEIGHT, share: float | None = RARE_SHARE) -> list[Hit]:  # fmt: skip
    """The top k of the rankings fused (see the module docstring); each hit keeps the first text and metadata.
    `share=None` leaves the rare-term signal out."""
    hits: dict[str, Hit] = {}
    for r in rankings:
        for h in r.hits:
            hits.setdefault(h.id, h)
    semantic = [r for r in rankings if r.kind != "text"]
    text = [r for r in rankings if r.kind == "text"]
    parts = [(r, weight / len(semantic) if text else 1.0 / len(semantic)) for r in semantic]
    parts += [(r, (1.0 - weight if semantic else 1.0) / len(text)) for r in text]
    score = dict.fromkeys(hits, 0.0)
    for r, w in parts:
        norm, missing = _normalised(r)
        for i in score:
            score[i] += w * norm.get(i, missing)
    if text and query and share is not None:
        ids = list(hits)
        rare = _rare(query, [hits[i].text.lower() for i in ids], share)
        if rare:
            for j in set.intersection(*rare.values()):
                score[ids[j]] += 1.0
    order = sorted(score, key=lambda i: -score[i])[:k]
    return [Hit(i, score[i], hits[i].text, hits[i].metadata) for i in order]


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
