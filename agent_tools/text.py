"""Text helpers for the tools: a token estimate, sentence and passage splitting (all linear in the text)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\w+|[^\w\s]")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n|\n(?=\s*[-*•]\s)")
_PARAGRAPH = re.compile(r"\n\s*\n")
_WORD = re.compile(r"\S+")


def count_tokens(text: str) -> int:
    """Words plus punctuation marks: a tokenizer-free estimate of what an LLM will be sent."""
    return sum(1 for _ in _TOKEN.finditer(text))


@dataclass
class Span:
    """A piece of a text with its character offsets in the original."""

    text: str
    start: int
    end: int


def split_sentences(text: str, offset: int = 0) -> list[Span]:
    """Sentences at ., ! or ? followed by a capital or digit, at blank lines and before list bullets."""
    out: list[Span] = []
    start = 0
    for m in _SENTENCE_END.finditer(text):
        _append(out, text, start, m.start(), offset)
        start = m.end()
    _append(out, text, start, len(text), offset)
    return out


def split_passages(text: str, max_tokens: int = 120) -> list[Span]:
    """Paragraphs, with short neighbours merged and long ones cut at sentence ends to about max_tokens each
    (a sentence longer than that is cut between words)."""
    pieces: list[Span] = []
    start = 0
    for m in [*_PARAGRAPH.finditer(text), None]:
        end = m.start() if m else len(text)
        para = text[start:end]
        if para.strip():
            pieces.extend(_cut(split_sentences(para, start), max_tokens))
        start = m.end() if m else len(text)
        if m is None:
            break
    return _merge(text, pieces, max_tokens)


def _append(out: list[Span], text: str, start: int, end: int, offset: int) -> None:
    piece = text[start:end]
    stripped = piece.strip()
    if stripped:
        lead = len(piece) - len(piece.lstrip())
        out.append(Span(stripped, offset + start + lead, offset + start + lead + len(stripped)))


def _cut(sentences: list[Span], max_tokens: int) -> list[Span]:
    """Sentences of one paragraph, with any sentence over max_tokens split between words."""
    out = []
    for s in sentences:
        if count_tokens(s.text) <= max_tokens:
            out.append(s)
            continue
        words = list(_WORD.finditer(s.text))
        step = max(1, max_tokens // 2)  # punctuation counts too: stay well under the limit
        for k in range(0, len(words), step):
            a, b = words[k].start(), words[min(k + step, len(words)) - 1].end()
            out.append(Span(s.text[a:b], s.start + a, s.start + b))
    return out


def _merge(text: str, pieces: list[Span], max_tokens: int) -> list[Span]:
    """Join consecutive pieces while they fit in max_tokens; a paragraph break starts a new passage once the
    current one holds half of max_tokens (so headings and one-line paragraphs join their neighbours)."""
    out: list[Span] = []
    tokens = 0
    for p in pieces:
        n = count_tokens(p.text)
        fits = tokens + n <= max_tokens
        if fits and out and tokens >= max_tokens // 2:
            fits = not _PARAGRAPH.search(text, out[-1].end, p.start)
        if out and fits:
            last = out[-1]
            out[-1] = Span(text[last.start : p.end], last.start, p.end)
            tokens += n
        else:
            out.append(p)
            tokens = n
    return out
