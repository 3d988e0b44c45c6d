"""PDF text with page numbers via pymupdf; headings from the outline when present, else from font sizes."""

from __future__ import annotations

import re
import threading
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


_OPEN_LOCK = threading.Lock()  # MuPDF's warning buffer is process-wide: one open reads its own warnings


def damage(data: bytes, warnings: str) -> str:
    """Why a PDF that MuPDF had to repair is damaged: a missing end marker first, then MuPDF's own words."""
    lines = (w.strip().removeprefix("format error: ") for w in warnings.splitlines())
    said = list(dict.fromkeys(w for w in lines if w and "repeated" not in w and "repair" not in w))
    reasons = [] if b"%%EOF" in data[-1024:] else ["the file ends before its %%EOF marker"]
    reasons += said[:3] or ["its cross-reference table is broken and had to be rebuilt"]
    return "; ".join(reasons)


def pdf_document(data: bytes) -> Document:
    """Paragraph blocks per page with their heading path; encrypted or broken files raise ParseError.

    A file MuPDF opens only by repairing it (a cut body, a missing or broken xref) is damaged: with no text
    recovered it fails as "damaged PDF" with the reason, never as a text-less (scanned) one; with text
    recovered it is ingested with a warning that names the damage.
    """
    import pymupdf

    with _OPEN_LOCK:
        pymupdf.TOOLS.mupdf_warnings(reset=True)  # type: ignore[no-untyped-call]
        try:  # pymupdf ships py.typed but leaves Document.__init__ and Page.get_text unannotated: ignored below
            doc = pymupdf.open(stream=data, filetype="pdf")  # type: ignore[no-untyped-call]
        except Exception as e:  # noqa: BLE001 - pymupdf raises several types for damaged files
            hint = "" if b"%%EOF" in data[-1024:] else " (the file ends before its %%EOF marker: truncated?)"
            raise ParseError(f"damaged PDF: it cannot be opened: {e}{hint}") from e
        repaired = bool(doc.is_repaired) and not doc.needs_pass
        why = damage(data, str(pymupdf.TOOLS.mupdf_warnings())) if repaired else ""  # type: ignore[no-untyped-call]
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
            raise ParseError(f"damaged PDF: page content unreadable: {e}") from e
        n_pages = doc.page_count

    if repaired and not raw:
        raise ParseError(f"damaged PDF (truncated or broken): {why}; no text could be recovered")
    warnings = [f"damaged PDF repaired on reading ({why}): some text may be missing"] if repaired else []
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
    return Document("pdf", blocks, title=title, pages=n_pages, warnings=warnings)
