"""Lexical (BM25) terms computed locally: a sparse vector per text for stores without a BM25 of their own.

Words are lower-cased; a hyphenated or dotted identifier ("E-417", "v2.1") is kept whole and also split
into its parts. A term's index is a stable 31-bit hash, so no vocabulary has to be stored. A document's
weights are BM25's saturated term frequencies; the store multiplies them by IDF (Qdrant's `Modifier.IDF`).
`doc_vectors` gives the same vectors for a batch of texts at a fraction of the cost (what writes use).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import numpy.typing as npt

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
    return _piece_terms(text.lower())


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


@dataclass(frozen=True)
class DocVectors:
    """`doc_vector` of many texts at once: text i's term ids are indices[offsets[i]:offsets[i + 1]] (ascending)."""

    indices: npt.NDArray[np.int32]
    values: npt.NDArray[np.float64]
    offsets: npt.NDArray[np.int64]  # [n + 1]

    def __getitem__(self, i: int) -> SparseVector:
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return {"indices": self.indices[lo:hi].tolist(), "values": self.values[lo:hi].tolist()}


class _WordTerms(dict[str, tuple[int, ...]]):
    """Term ids of one whitespace-separated piece of lower-cased text, computed on first sight (bounded by the
    caller). Tokens never hold whitespace, so a text's terms are its pieces' terms in order."""

    def __missing__(self, piece: str) -> tuple[int, ...]:
        if piece.isalnum():  # all of it \w but "_" (str.isalnum and the regex share one test): one word, no regex
            ids: tuple[int, ...] = () if piece in STOPWORDS else (zlib.crc32(piece.encode()) & 0x7FFFFFFF,)  # term_id
        else:
            ids = tuple(term_id(t) for t in _piece_terms(piece))
        self[piece] = ids
        return ids


_PIECES = _WordTerms()
_PIECES_MAX = 1 << 16  # pieces remembered (about 15 MB); past this the table starts afresh (ids are hashes)


def _piece_terms(lowered: str) -> list[str]:
    """`terms` of text already lower-cased (lower-casing twice is not always a no-op, so it is done once)."""
    out: list[str] = []
    for word in _TOKEN.findall(lowered):
        if word not in STOPWORDS:
            out.append(word)
        if "-" in word or "." in word or "/" in word or "'" in word:  # _SPLIT's characters, without a regex call
            out += [p for p in _SPLIT.split(word) if p and p not in STOPWORDS]
    return out


def doc_vectors(texts: Sequence[str]) -> DocVectors:
    """`doc_vector` of every text, the same term ids and the same float64 weights, counted for the batch at once.

    Each text is lower-cased once and split on whitespace; each piece's term ids come from a bounded table
    (most pieces of a corpus repeat), so the regex, the stop words and the hashes run once per new piece. The
    term frequencies, lengths and BM25 weights of the whole batch are then a few numpy operations."""
    if len(_PIECES) > _PIECES_MAX:
        _PIECES.clear()
    piece = _PIECES.__getitem__
    chain = itertools.chain.from_iterable
    per_text = [list(chain(map(piece, text.lower().split()))) for text in texts]
    lengths = np.fromiter(map(len, per_text), dtype=np.int64, count=len(per_text))
    ids = np.fromiter(chain(per_text), dtype=np.int64, count=int(lengths.sum()))
    text_of = np.repeat(np.arange(len(per_text), dtype=np.int64), lengths)
    keys, tf = np.unique((text_of << 31) | ids, return_counts=True)  # sorted: by text, then by term id
    owner = keys >> 31
    norm = K1 * (1 - B + B * lengths / AVG_LEN)  # the same float64 operations, in the same order, as doc_vector
    values = tf * (K1 + 1) / (tf + norm[owner])
    offsets = np.zeros(len(per_text) + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=len(per_text)), out=offsets[1:])
    return DocVectors((keys & 0x7FFFFFFF).astype(np.int32), values.astype(np.float64), offsets)


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
