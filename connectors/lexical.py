"""Lexical (BM25) terms computed locally: a sparse vector per text for stores without a BM25 of their own.

Words are lower-cased; a hyphenated or dotted identifier ("E-417", "v2.1") is kept whole and also split
into its parts. A term's index is a stable 31-bit hash, so no vocabulary has to be stored. A document's
weights are BM25's saturated term frequencies; the store multiplies them by IDF (Qdrant's `Modifier.IDF`).
"""

from __future__ import annotations

import functools
import math
import re
import zlib
from collections import Counter
from typing import TypedDict

K1 = 1.2
B = 0.75
AVG_LEN = 120  # words in a typical chunk (200 model tokens); only shapes length normalisation
_TOKEN = re.compile(r"\w+(?:[-./']\w+)*")
_SPLIT = re.compile(r"[-./']")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "may",
        "me",
        "must",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "up",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


def terms(text: str) -> list[str]:
    """The lexical terms of a text, in order, stop words dropped."""
    out: list[str] = []
    for word in _TOKEN.findall(text.lower()):
        if word not in STOPWORDS:
            out.append(word)
        if "-" in word or "." in word or "/" in word or "'" in word:  # _SPLIT's characters, without a regex call
            out += [p for p in _SPLIT.split(word) if p and p not in STOPWORDS]
    return out


class SparseVector(TypedDict):
    """A sparse vector: term ids (ascending) and their weights."""

    indices: list[int]
    values: list[float]


@functools.lru_cache(maxsize=1 << 16)  # a vocabulary's common terms; bounded, so a long run does not grow it
def term_id(term: str) -> int:
    return zlib.crc32(term.encode()) & 0x7FFFFFFF


def doc_vector(text: str) -> SparseVector:
    """BM25 term-frequency weights of a document, as a sparse vector {indices, values}."""
    counts = Counter(map(term_id, terms(text)))
    norm = K1 * (1 - B + B * sum(counts.values()) / AVG_LEN)
    items = sorted(counts.items())
    return {"indices": [i for i, _ in items], "values": [tf * (K1 + 1) / (tf + norm) for _, tf in items]}


def query_vector(text: str) -> SparseVector:
    """A query's distinct terms, each weighted 1 (the store's IDF does the rest)."""
    ids = sorted({term_id(t) for t in terms(text)})
    return {"indices": ids, "values": [1.0] * len(ids)}


def _counts(text: str) -> tuple[Counter[str], int]:
    """Term counts of a text (compound words also counted by their parts) and its length in terms."""
    counts = Counter(_TOKEN.findall(text.lower()))
    for word, n in [(w, n) for w, n in counts.items() if _SPLIT.search(w)]:
        for part in _SPLIT.split(word):
            if part:
                counts[part] += n
    return counts, sum(n for w, n in counts.items() if w not in STOPWORDS)


def bm25_scores(query: str, docs: dict[str, str], df: dict[str, int], n_docs: int) -> dict[str, float]:
    """BM25 of candidate documents for a query, given each query term's document frequency in the collection."""
    q = [t for t in dict.fromkeys(terms(query)) if df.get(t)]
    idf = {t: math.log(1 + (n_docs - df[t] + 0.5) / (df[t] + 0.5)) for t in q}
    scores: dict[str, float] = {}
    for doc_id, text in docs.items():
        counts, length = _counts(text)
        norm = K1 * (1 - B + B * length / AVG_LEN)
        s = sum(idf[t] * counts[t] * (K1 + 1) / (counts[t] + norm) for t in q if counts.get(t))
        if s > 0:
            scores[doc_id] = s
    return scores
