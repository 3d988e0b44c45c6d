"""Scaling of every parser and the chunker: generated 0.2, 2 and 20 MB documents of each type, MB/s per size.

A linear path keeps its MB/s as the document grows, so its 20 MB cost is about 100x its 0.2 MB cost; a
quadratic one would cost 10,000x. Used by bench/ingest.py (`--sizes` there); sizes are the file's bytes.
"""

from __future__ import annotations

import html
import random
import time
from collections.abc import Callable

from tests.corpus import OBJECTS, sentence

KINDS = ("text", "markdown", "html", "pdf")
EXT = {"text": "txt", "markdown": "md", "html": "html", "pdf": "pdf"}


def _paragraph(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 7)))


def _fill(size: int, piece: Callable[[int], str]) -> str:
    out, n, i = [], 0, 0
    while n < size:
        s = piece(i)
        out.append(s)
        n += len(s)
        i += 1
    return "".join(out)


def make_text(size: int, rng: random.Random) -> bytes:
    return _fill(size, lambda i: _paragraph(rng) + "\n\n").encode()


def make_markdown(size: int, rng: random.Random) -> bytes:
    def section(i: int) -> str:
        paras = "\n\n".join(_paragraph(rng) for _ in range(3))
        extra = f"\n\n### Check {i}\n\n```\nvalve {i} = {i % 7} bar\n```" if i % 10 == 0 else ""
        return f"## Section {i}: {rng.choice(OBJECTS)}\n\n{paras}{extra}\n\n"

    return ("# Operations manual\n\n" + _fill(size, section)).encode()


def make_html(size: int, rng: random.Random) -> bytes:
    def section(i: int) -> str:
        paras = "".join(f"<p>{html.escape(_paragraph(rng))}</p>" for _ in range(3))
        items = "".join(f"<li>{html.escape(sentence(rng))}</li>" for _ in range(2))
        hidden = f"<div hidden><b><i>draft {i}</div><script>var s{i} = '<p>';</script>" if i % 20 == 0 else ""
        return f"<section><h2>Section {i}: {rng.choice(OBJECTS)}</h2>{paras}<ul>{items}</ul>{hidden}</section>\n"

    head = "<!DOCTYPE html><html><head><title>Operations manual</title><style>p {margin: 0}</style></head><body>"
    return (head + "<h1>Operations manual</h1>" + _fill(size, section) + "</body></html>\n").encode()


def make_pdf(size: int, rng: random.Random) -> bytes:
    """Pages of 10 pt paragraphs under a 14 pt heading, uncompressed so file bytes track the text.

    50 distinct pages are laid out, then the document is doubled with insert_pdf (fast, in C) and cut to
    the page count the size needs: the text repeats every 50 pages, the parsing work does not change.
    """
    import pymupdf

    def wrap(text: str) -> str:
        lines, line = [], []
        for w in text.split():
            line.append(w)
            if sum(len(x) + 1 for x in line) > 90:
                lines.append(" ".join(line))
                line = []
        return "\n".join([*lines, " ".join(line)])

    doc = pymupdf.open()
    for _ in range(50):
        page = doc.new_page(width=595, height=842)
        page.insert_text((56, 60), f"Section: {rng.choice(OBJECTS)}", fontsize=14)
        y = 90.0
        while y < 700:
            para = wrap(_paragraph(rng))
            page.insert_text((56, y), para, fontsize=10, lineheight=1.3)
            y += (para.count("\n") + 1) * 13 + 12
    per_page = len(doc.tobytes(garbage=1, deflate=False)) / 50
    pages = max(1, round(size / per_page))
    while doc.page_count < pages:
        with pymupdf.open(stream=doc.tobytes(), filetype="pdf") as copy:
            doc.insert_pdf(copy, to_page=min(copy.page_count, pages - doc.page_count) - 1)
    doc.select(range(pages))
    data = doc.tobytes(garbage=1, deflate=False)
    doc.close()
    return data


MAKERS: dict[str, Callable[[int, random.Random], bytes]] = {
    "text": make_text,
    "markdown": make_markdown,
    "html": make_html,
    "pdf": make_pdf,
}


def make_document(kind: str, size: int, seed: int = 0) -> bytes:
    """A generated document of about `size` bytes of the given kind."""
    return MAKERS[kind](size, random.Random(seed))


def measure(sizes_mb: list[float], chunker: object, log: Callable[[str], None] = print) -> list[dict]:
    """Parse and chunk one generated document per kind and size; a row per (kind, size) with MB/s.

    Times are CPU seconds of this process (parsing and chunking are single-threaded here; tokenizer
    parallelism is off), so other work on a shared machine skews them little; wall seconds are kept too.
    Each size is the mean over repeats (at least 2 CPU seconds), not the best of them.
    """
    from pipeline.parsers import parse

    rows = []
    for kind in KINDS:
        parse(make_document(kind, 20_000), f"warm.{EXT[kind]}")  # imports and first-call costs, untimed
        for mb in sizes_mb:
            data = make_document(kind, int(mb * 1_000_000), seed=7)
            size = len(data) / 1_000_000
            parse_s = chunk_s = wall = 0.0
            runs = 0
            while runs == 0 or parse_s + chunk_s < 2.0:  # small sizes: repeated for 2 s, the mean taken
                w0, t0 = time.perf_counter(), time.process_time()
                doc = parse(data, f"doc.{EXT[kind]}")
                t1 = time.process_time()
                chunks = chunker.chunk(doc, "doc")  # type: ignore[attr-defined]
                parse_s, chunk_s = parse_s + t1 - t0, chunk_s + time.process_time() - t1
                wall, runs = wall + time.perf_counter() - w0, runs + 1
            parse_s, chunk_s, wall = parse_s / runs, chunk_s / runs, wall / runs
            text_mb = sum(len(b.text) for b in doc.blocks) / 1_000_000
            row = {
                "kind": kind, "size_mb": round(size, 2), "text_mb": round(text_mb, 2), "pages": doc.pages,
                "blocks": len(doc.blocks), "chunks": len(chunks), "parse_s": round(parse_s, 4),
                "chunk_s": round(chunk_s, 4), "parse_mb_s": round(size / parse_s, 2),
                "chunk_mb_s": round(text_mb / chunk_s, 2), "wall_s": round(wall, 3),
            }  # fmt: skip
            rows.append(row)
            log(
                f"{kind:<9}{row['size_mb']:>8.2f}{row['blocks']:>9}{row['chunks']:>8}{row['parse_s']:>9.2f}"
                f"{row['parse_mb_s']:>9.2f}{row['chunk_s']:>9.2f}{row['chunk_mb_s']:>9.2f}"
            )
    return rows


HEADER = f"{'kind':<9}{'MB':>8}{'blocks':>9}{'chunks':>8}{'parse s':>9}{'MB/s':>9}{'chunk s':>9}{'MB/s':>9}"


def cost_ratios(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per kind: seconds at the largest size / seconds at the smallest, per MB of each (1.0 = linear)."""
    out = {}
    for kind in KINDS:
        rs = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["size_mb"])
        if len(rs) < 2:
            continue
        lo, hi = rs[0], rs[-1]
        out[kind] = {
            "size_ratio": round(hi["size_mb"] / lo["size_mb"], 1),
            "parse_cost_ratio": round(hi["parse_s"] / lo["parse_s"], 1),
            "chunk_cost_ratio": round(hi["chunk_s"] / lo["chunk_s"], 1),
        }
    return out
