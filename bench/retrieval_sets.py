"""The public test collections of bench/retrieval.py, read from bench/data/retrieval (SMART-format files, gzipped).

Each collection: documents (id -> text), queries (id -> text) and judgments (query id -> relevant document ids);
only queries with at least one judgment are kept. See bench/data/retrieval/NOTICE for sources and licences.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "retrieval"


@dataclass
class Collection:
    name: str
    docs: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, set[str]]
    source: str


def _records(path: Path, keep: tuple[str, ...]) -> dict[str, str]:
    """SMART records: `.I id` then fields (`.T`, `.W`, ...); the text of the fields in `keep`, joined."""
    out: dict[str, str] = {}
    text = gzip.decompress(path.read_bytes()).decode("latin-1").replace("\r", "")
    for block in re.split(r"^\.I\s+", text, flags=re.M)[1:]:
        ident, _, body = block.partition("\n")
        parts = re.split(r"^\.([A-Z])\s*$", body, flags=re.M)
        fields = [p.strip() for tag, p in zip(parts[1::2], parts[2::2], strict=True) if tag in keep]
        joined = "\n\n".join(" ".join(f.split()) for f in fields if f)
        if joined:
            out[ident.strip()] = joined
    return out


def _qrels(path: Path, doc_col: int) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for line in gzip.decompress(path.read_bytes()).decode().splitlines():
        cols = line.split()
        if len(cols) > doc_col:
            out.setdefault(str(int(cols[0])), set()).add(str(int(cols[doc_col])))
    return out


def _collection(name: str, docs: dict[str, str], queries: dict[str, str], qrels: dict[str, set[str]], src: str) -> Collection:  # fmt: skip
    queries = {str(int(q)): t for q, t in queries.items()}
    judged = {q: {d for d in rel if d in docs} for q, rel in qrels.items() if q in queries}
    judged = {q: rel for q, rel in judged.items() if rel}
    return Collection(name, docs, {q: queries[q] for q in judged}, judged, src)


def cisi() -> Collection:
    d = DATA / "cisi"
    docs = _records(d / "CISI.ALL.gz", ("T", "W"))
    return _collection("CISI", docs, _records(d / "CISI.QRY.gz", ("W",)), _qrels(d / "CISI.REL.gz", 1), "Glasgow IR group")  # fmt: skip


def med() -> Collection:
    d = DATA / "med"
    docs = _records(d / "MED.ALL.gz", ("W",))
    return _collection("MED", docs, _records(d / "MED.QRY.gz", ("W",)), _qrels(d / "MED.REL.gz", 1), "Glasgow IR group")  # fmt: skip


def cacm() -> Collection:
    d = DATA / "cacm"
    docs = _records(d / "cacm.all.gz", ("T", "W"))
    return _collection("CACM", docs, _records(d / "query.text.gz", ("W",)), _qrels(d / "qrels.text.gz", 1), "SMART / Glasgow IR group")  # fmt: skip


COLLECTIONS = {"cisi": cisi, "med": med, "cacm": cacm}
