"""Parsers keyed by a type sniffed from content: PDF (pymupdf), Markdown, HTML, plain text."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator

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


PARAGRAPH = re.compile(r"\S(?:.*?\S)?(?=\s*\n\s*\n|\s*\Z)", flags=re.S)  # blank-line separated, stripped


def parse_text(data: bytes, invalid_utf8: str) -> Document:
    text, warnings = decode_text(data, invalid_utf8)
    return Document("text", [], warnings=warnings, stream=text_blocks(text))


def text_blocks(text: str) -> Iterator[Block]:
    """The paragraphs of a plain text as blocks, found as they are read (nothing held but the text)."""
    for m in PARAGRAPH.finditer(text):
        yield Block(m.group(0), m.start(), m.end())


HEADING = re.compile(r"^(#{1,6})[ \t]+(.+)$")  # the closing #s are stripped in code: linear, no backtracking
SETEXT = re.compile(r"^(=+|-+)[ \t]*$")
FENCE = re.compile(r"^[ \t]*(```|~~~)")
LINE_ENDS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines breaks
LINE = re.compile(f"[^{LINE_ENDS}]*(?:\r\n|[{LINE_ENDS}]|$)")


def lines_of(text: str) -> Iterator[tuple[int, str]]:
    """(offset, line with its end) as `splitlines(keepends=True)` gives them, one at a time."""
    for m in LINE.finditer(text):
        if m.group(0):
            yield m.start(), m.group(0)


def parse_markdown(data: bytes, invalid_utf8: str) -> Document:
    """Paragraphs and fenced code blocks under their heading path (ATX and setext headings)."""
    text, warnings = decode_text(data, invalid_utf8)
    doc = Document("markdown", [], warnings=warnings)
    doc.stream = markdown_blocks(text, doc)
    return doc


def markdown_blocks(text: str, doc: Document) -> Iterator[Block]:
    """The blocks of a Markdown text as its lines are read; the first heading becomes `doc.title`."""
    stack: list[tuple[int, str]] = []
    para: list[tuple[int, str]] = []  # (offset, line) of the open paragraph
    fence: str | None = None

    def flush() -> Iterator[Block]:
        if para:
            s, e = para[0][0], para[-1][0] + len(para[-1][1].rstrip())
            chunk = text[s:e].strip()
            if chunk:
                lead = len(text[s:e]) - len(text[s:e].lstrip())
                yield Block(chunk, s + lead, s + lead + len(chunk), None, tuple(h for _, h in stack))
            para.clear()

    def heading(level: int, name: str) -> Iterator[Block]:
        yield from flush()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, name.strip()))
        doc.title = doc.title or name.strip()

    for at, line in lines_of(text):
        stripped = line.strip()
        if fence:
            para.append((at, line))
            if stripped.startswith(fence):
                fence = None
                yield from flush()
            continue
        if m := FENCE.match(line):
            yield from flush()
            fence = m.group(1)
            para.append((at, line))
            continue
        if m := HEADING.match(stripped):
            rest = m.group(2)
            yield from heading(len(m.group(1)), rest.rstrip("#").rstrip(" \t") or rest[:1])
        elif SETEXT.match(stripped) and len(para) == 1 and para[0][1].strip():
            name = para.pop()[1].strip()
            yield from heading(1 if stripped[0] == "=" else 2, name)
        elif not stripped:
            yield from flush()
        else:
            para.append((at, line))
    yield from flush()


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
    doc = parse_stream(data, name, invalid_utf8)
    if doc.stream is not None:
        doc.blocks, doc.stream = list(doc.stream), None
    return doc


def parse_stream(data: bytes, name: str, invalid_utf8: str = "fail") -> Document:
    """`parse`, but a text or Markdown document's blocks come as `doc.stream`, read as they are taken, so
    a large file is held as its text alone (PDF and HTML blocks are parsed at once and listed)."""
    if not data.strip():
        raise ParseError("empty file" if not data else "empty file (whitespace only)")
    kind = sniff(data, name)
    if kind == "binary":
        raise ParseError("binary content (not a PDF, Markdown, HTML or text document)")
    doc = PARSERS[kind](data, invalid_utf8)
    if doc.stream is not None:
        first = next((b for b in doc.stream if b.text.strip()), None)  # the rest is read later
        if first is None:
            raise ParseError(f"no text found in the {kind} document")
        doc.stream = itertools.chain([first], doc.stream)
        return doc
    doc = _storable(doc)
    if not any(b.text.strip() for b in doc.blocks):
        hint = " (scanned pages? no OCR step is configured)" if kind == "pdf" else ""
        raise ParseError(f"no text found in the {kind} document{hint}")
    return doc
