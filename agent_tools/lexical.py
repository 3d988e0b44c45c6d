"""Lexical relevance for the context filter: BM25 over the passages of one call, identifiers kept whole.

Technical text turns on exact names (`net.Socket`, `scrypt`, `max_connections`) that an embedding model
blurs. Terms are lower-cased words plus every dotted, underscored or camel-case identifier both whole and
split into its parts, so a query naming `net.Socket` matches the passage about `net.Socket` more than one
about sockets in general. Document frequencies come from the passages themselves (no corpus needed), and a
few very common English words are skipped. Linear in the text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.:/-][A-Za-z_][A-Za-z0-9_]*)*|\d+(?:\.\d+)*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "is",
        "it",
        "its",
        "my",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "their",
        "there",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)
K1, B = 1.2, 0.75


def terms(text: str) -> list[str]:
    """Words and identifiers, whole and in parts, lower-cased, without stop words."""
    out: list[str] = []
    for m in _IDENT.finditer(text):
        token = m.group()
        whole = token.lower()
        parts = [p.lower() for piece in re.split(r"[._:/-]", token) for p in _CAMEL.findall(piece) or [piece]]
        if whole not in STOP:
            out.append(whole)
        if len(parts) > 1 or (parts and parts[0] != whole):
            out.extend(p for p in parts if p not in STOP and p != whole)
    return out


def bm25(query: str, texts: list[str]) -> np.ndarray:
    """BM25 of each text for the query, document frequencies from the texts themselves."""
    import numpy as np

    docs = [Counter(terms(t)) for t in texts]
    q = set(terms(query))
    n = len(docs)
    if not n or not q:
        return np.zeros(n, dtype=np.float64)
    lengths = np.array([sum(d.values()) for d in docs], dtype=np.float64)
    average = max(float(lengths.mean()), 1.0)
    out = np.zeros(n, dtype=np.float64)
    for term in q:
        df = sum(1 for d in docs if term in d)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        tf = np.array([d.get(term, 0) for d in docs], dtype=np.float64)
        out += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths / average))
    return out


def standardise(scores: np.ndarray) -> np.ndarray:
    """Scores in units of their own spread (0 when they are all equal)."""
    import numpy as np

    if scores.size < 2:
        return np.zeros_like(scores, dtype=np.float64)
    sd = float(scores.std())
    return (scores - scores.mean()) / sd if sd > 1e-12 else np.zeros_like(scores, dtype=np.float64)
