"""Parsers keyed by a type sniffed from content: PDF (pymupdf), Markdown, HTML, plain text."""

from __future__ import annotations

import re
from collections.abc import Callable

from pipeline.document import Block, Document, ParseError
from pipeline.htmltext import html_blocks
from pipeline.pdf import pdf_document

__all__ = ["Block", "Document", "ParseError", "parse", "sniff"]


BINARY_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"PK\x03\x04", b"\x7fELF", b"\x1f\x8b", b"BZh", b"7z\xbc\xaf")


def sniff(data: bytes, name: str) -> str:
    """The document type from its bytes first, its extension second: pdf, html, markdown, text or binary."""
    head = data[:8192]
    if head.lstrip()[:5] == b"%PDF-" or b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(BINARY_MAGIC) or (b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff"))):
        return "binary"
    lower = head.lstrip().lower()
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if lower.startswith((b"<!doctype html", b"<html")) or (ext in ("html", "htm") and b"<" in head):
        return "html"
    if ext in ("md", "markdown", "mdown"):
        return "markdown"
    return "text"


def decode_text(data: bytes, invalid_utf8: str) -> tuple[str, list[str]]:
    """UTF-8 (BOMs honoured, UTF-16 by BOM); invalid bytes fail the file unless the config says replace."""
    codec = "utf-16" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig"
    try:
        return data.decode(codec), []
    except UnicodeDecodeError as e:
        name = "UTF-16" if codec == "utf-16" else "UTF-8"
        reason = f"invalid {name} at byte {e.start} ({data[e.start : e.start + 4]!r})"
        if invalid_utf8 != "replace":
            raise ParseError(f"{reason}: not a {name} text file (set source.invalid_utf8: replace to decode it)") from e
        return data.decode(codec, errors="replace"), [f"{reason}: decoded with replacement characters"]


SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(doc: Document) -> Document:
    """Lone surrogates (a PDF's odd text map) cannot be stored or tokenized: U+FFFD instead, with a warning."""
    fixed = 0
    heads: dict[tuple[str, ...], tuple[str, ...]] = {}  # each heading path checked once, not once per block

    def clean(s: str) -> str:
        nonlocal fixed
        if s.isascii() or SURROGATE.search(s) is None:
            return s
        fixed += 1
        return SURROGATE.sub("\ufffd", s)  # same length: offsets hold

    for b in doc.blocks:
        b.text = clean(b.text)
        if b.headings not in heads:
            heads[b.headings] = tuple(clean(h) for h in b.headings)
        b.headings = heads[b.headings]
    doc.title = clean(doc.title) if doc.title else doc.title
    if fixed:
        doc.warnings.append(f"lone surrogate code points replaced by U+FFFD in {fixed} places")
    return doc


def paragraphs(text: str, base: int = 0) -> list[tuple[str, int, int]]:
    """Blank-line separated paragraphs with their (stripped) char offsets."""
    out = []
    for m in re.finditer(r"\S(?:.*?\S)?(?=\s*\n\s*\n|\s*\Z)", text, flags=re.S):
        out.append((m.group(0), base + m.start(), base + m.end()))
    return out


def parse_text(data: bytes, invalid_utf8: str) -> Document:
    text, warnings = decode_text(data, invalid_utf8)
    blocks = [Block(t, s, e) for t, s, e in paragraphs(text)]
    return Document("text", blocks, warnings=warnings)


HEADING = re.compile(r"^(#{1,6})[ \t]+(.+)$")  # the closing #s are stripped in code: linear, no backtracking
SETEXT = re.compile(r"^(=+|-+)[ \t]*$")
FENCE = re.compile(r"^[ \t]*(```|~~~)")


def parse_markdown(data: bytes, invalid_utf8: str) -> Document:
    """Paragraphs and fenced code blocks under their heading path (ATX and setext headings)."""
    text, warnings = decode_text(data, invalid_utf8)
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    blocks: list[Block] = []
    stack: list[tuple[int, str]] = []
    title: str | None = None
    para: list[int] = []  # line indexes of the open paragraph
    fence: str | None = None

    def flush() -> None:
        if para:
            s, e = starts[para[0]], starts[para[-1]] + len(lines[para[-1]].rstrip())
            chunk = text[s:e].strip()
            if chunk:
                lead = len(text[s:e]) - len(text[s:e].lstrip())
                blocks.append(Block(chunk, s + lead, s + lead + len(chunk), None, tuple(h for _, h in stack)))
            para.clear()

    def heading(level: int, name: str) -> None:
        nonlocal title
        flush()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, name.strip()))
        title = title or name.strip()

    for i, line in enumerate(lines):
        stripped = line.strip()
        if fence:
            para.append(i)
            if stripped.startswith(fence):
                fence = None
                flush()
            continue
        if m := FENCE.match(line):
            flush()
            fence = m.group(1)
            para.append(i)
            continue
        if m := HEADING.match(stripped):
            rest = m.group(2)
            heading(len(m.group(1)), rest.rstrip("#").rstrip(" \t") or rest[:1])
        elif SETEXT.match(stripped) and len(para) == 1 and lines[para[0]].strip():
            name = lines[para.pop()].strip()
            heading(1 if stripped[0] == "=" else 2, name)
        elif not stripped:
            flush()
        else:
            para.append(i)
    flush()
    return Document("markdown", blocks, title=title, warnings=warnings)


def parse_html(data: bytes, invalid_utf8: str) -> Document:
    text, warnings = decode_text(data, invalid_utf8)
    title, items = html_blocks(text)
    blocks, pos = [], 0
    for body, headings in items:
        blocks.append(Block(body, pos, pos + len(body), None, headings))
        pos += len(body) + 2  # blocks are joined by a blank line in the extracted text
    return Document("html", blocks, title=title, warnings=warnings)


def parse_pdf(data: bytes, invalid_utf8: str) -> Document:
    return pdf_document(data)


PARSERS: dict[str, Callable[[bytes, str], Document]] = {
    "pdf": parse_pdf,
    "markdown": parse_markdown,
    "html": parse_html,
    "text": parse_text,
}


def parse(data: bytes, name: str, invalid_utf8: str = "fail") -> Document:
    """Sniff and parse one file's bytes; raises ParseError with the reason when it cannot be ingested."""
    if not data.strip():
        raise ParseError("empty file" if not data else "empty file (whitespace only)")
    kind = sniff(data, name)
    if kind == "binary":
        raise ParseError("binary content (not a PDF, Markdown, HTML or text document)")
    doc = _storable(PARSERS[kind](data, invalid_utf8))
    if not any(b.text.strip() for b in doc.blocks):
        hint = " (scanned pages? no OCR step is configured)" if kind == "pdf" else ""
        raise ParseError(f"no text found in the {kind} document{hint}")
    return doc
