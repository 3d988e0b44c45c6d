"""The document types every parser produces and the chunker reads: Document, Block, ParseError."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


class ParseError(Exception):
    """A document that cannot be ingested; the message is the reason recorded in the manifest."""


@dataclass
class Block:
    """A paragraph-sized piece of text with where it came from."""

    text: str
    start: int  # char offsets into the document's extracted text
    end: int
    page: int | None = None  # 1-based
    headings: tuple[str, ...] = ()


@dataclass
class Document:
    """A parsed document: its kind, its blocks in reading order, title, page count and parse warnings."""

    kind: str
    blocks: list[Block]
    title: str | None = None
    pages: int = 0
    warnings: list[str] = field(default_factory=list)
    stream: Iterator[Block] | None = None  # blocks still to be read (a streamed text); `blocks` holds none then
