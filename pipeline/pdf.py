"""PDF text with page numbers via pymupdf; headings from the outline when present, else from font sizes."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pipeline.document import Block, Document, ParseError


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().lower()


def _page_blocks(
    pno: int, blocks: list[dict[str, Any]], raw: list[tuple[int, str, float]], sizes: Counter[float]
) -> None:
    """A page's text blocks as (page, text, max font size), counting characters per font size."""
    for b in blocks:
        if b.get("type") != 0:
            continue
        lines, size = [], 0.0
        for line in b["lines"]:
            spans = [s for s in line["spans"] if s["text"].strip()]
            if not spans:
                continue
            lines.append("".join(s["text"] for s in line["spans"]).strip())
            for s in spans:
                sizes[round(s["size"], 1)] += len(s["text"])
                size = max(size, round(s["size"], 1))
        text = re.sub(r"-\n(?=[a-z])", "", "\n".join(lines))  # undo hyphenation at line ends
        text = re.sub(r"\s*\n\s*", " ", text).strip()
        if text:
            raw.append((pno, text, size))


def pdf_document(data: bytes) -> Document:
    """Paragraph blocks per page with their heading path; encrypted or broken files raise ParseError."""
    import pymupdf

    try:  # pymupdf ships py.typed but leaves Document.__init__ and Page.get_text unannotated: ignored below
        doc = pymupdf.open(stream=data, filetype="pdf")  # type: ignore[no-untyped-call]
    except Exception as e:  # noqa: BLE001 - pymupdf raises several types for damaged files
        raise ParseError(f"corrupted PDF: {e}") from e
    raw: list[tuple[int, str, float]] = []  # (page, text, max font size) per text block
    sizes: Counter[float] = Counter()
    with doc:
        if doc.needs_pass:
            raise ParseError("encrypted PDF: it needs a password to open")
        try:
            flags = pymupdf.TEXTFLAGS_DICT & ~pymupdf.TEXT_PRESERVE_LIGATURES & ~pymupdf.TEXT_PRESERVE_IMAGES
            for pno, page in enumerate(doc.pages(), start=1):  # one page's layout dict in memory at a time
                layout = page.get_text("dict", sort=True, flags=flags)  # type: ignore[no-untyped-call]
                _page_blocks(pno, layout["blocks"], raw, sizes)
            toc = doc.get_toc(simple=True)
            title = (doc.metadata or {}).get("title") or None
        except Exception as e:  # noqa: BLE001
            raise ParseError(f"corrupted PDF (page content unreadable): {e}") from e
        n_pages = doc.page_count

    if not raw:
        return Document("pdf", [], title=title, pages=n_pages)

    outline = {(p, _norm(t)): lvl for lvl, t, p in toc}
    body = sizes.most_common(1)[0][0]
    big = sorted({s for _, t, s in raw if s >= body * 1.15 and len(t) < 120}, reverse=True)
    level_of = {s: i + 1 for i, s in enumerate(big[:6])}

    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    pos = 0
    for pno, text, size in raw:
        level = outline.get((pno, _norm(text))) if outline else None
        if level is None and not outline and size in level_of:
            level = level_of[size]
        if level is not None:
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            title = title or text
            pos += len(text) + 2
            continue
        blocks.append(Block(text, pos, pos + len(text), pno, tuple(h for _, h in stack)))
        pos += len(text) + 2
    return Document("pdf", blocks, title=title, pages=n_pages)
