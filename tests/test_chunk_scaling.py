"""Linear parsers and chunker, checked by counting work (Python lines run, stack visits), never by time.

Each check feeds an input and the same input doubled; doubling may at most about double the work
(ratio <= 2.3). A rescan per block, per tag or per line would make the ratio approach 4.
"""

from __future__ import annotations

import html.parser
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import pipeline.chunking
import pipeline.htmltext
import pipeline.parsers
from pipeline.chunking import Chunker
from pipeline.config import ChunkConfig
from pipeline.htmltext import VisibleText, html_blocks
from pipeline.parsers import parse

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MAX_RATIO = 2.3


def lines_run(fn: Callable[[], object], modules: list[object]) -> int:
    """How many Python lines of the given modules `fn` executes (sys.settrace line events)."""
    files = {Path(m.__file__).resolve() for m in modules}  # type: ignore[attr-defined]
    names = {str(f) for f in files}
    count = 0

    def local(frame, event, arg):  # noqa: ANN001, ANN202
        nonlocal count
        if event == "line":
            count += 1
        return local

    def trace(frame, event, arg):  # noqa: ANN001, ANN202
        return local if frame.f_code.co_filename in names else None

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def assert_linear(small: int, large: int, what: str) -> None:
    assert small > 0
    ratio = large / small
    assert ratio <= MAX_RATIO, f"{what}: doubling the input multiplied the work by {ratio:.2f} ({small} -> {large})"


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    from engine.model.tokenizer import tokenizer_for

    tok = tokenizer_for(MODEL)
    return Chunker(tok.tokenizer, tok.max_len, ChunkConfig(target_tokens=120, overlap_tokens=24))


def many_paragraphs_html(n: int) -> bytes:
    """n short paragraphs (the shape that made the chunker quadratic: many blocks of a few units)."""
    paras = "".join(f"<p>Valve {i} is checked daily. It holds {i % 9} bar. Log it.</p>" for i in range(n))
    return f"<!DOCTYPE html><html><body><h1>Pumps</h1>{paras}</body></html>".encode()


def long_paragraph_md(n: int) -> bytes:
    """One heading, one huge paragraph of n sentences, some of them far over the token limit."""
    sentences = [f"Sentence {i} is about gauge {i * 7}." for i in range(n)]
    sentences[::50] = [" ".join(f"w{i}x{j}" for j in range(300)) for i in range(len(sentences[::50]))]
    return ("# Gauges\n\n" + " ".join(sentences) + "\n").encode()


@pytest.mark.parametrize(
    ("shape", "make", "n"), [("paragraphs", many_paragraphs_html, 400), ("one block", long_paragraph_md, 600)]
)
def test_chunker_work_doubles_at_most_with_input(chunker: Chunker, shape: str, make, n: int) -> None:  # noqa: ANN001
    docs = [parse(make(k), "d.html" if make is many_paragraphs_html else "d.md") for k in (n, 2 * n)]
    assert len(docs[1].blocks) >= len(docs[0].blocks)
    work = [lines_run(lambda d=d: chunker.chunk(d, "src"), [pipeline.chunking]) for d in docs]
    chunks = [len(chunker.chunk(d, "src")) for d in docs]
    assert chunks[1] >= 1.8 * chunks[0], chunks  # the doubled input really is twice the text
    assert_linear(work[0], work[1], f"chunker, {shape}")


def hidden_region(n: int) -> str:
    """A hidden region with n unclosed tags, then n end tags that close nothing (the quadratic case)."""
    return "<p>before</p><div hidden>" + "<b>" * n + "</i>" * n + "<span>x</span>" * n + "</div><p>after</p>"


def test_html_hidden_region_work_is_linear() -> None:
    n = 4000
    visits, lines = [], []
    for k in (n, 2 * n):
        parser = VisibleText()
        lines.append(
            lines_run(lambda k=k, p=parser: html_blocks(hidden_region(k), p), [pipeline.htmltext, html.parser])
        )
        visits.append(parser.hidden.work)
        assert [b[0] for b in parser.blocks] == ["before", "after"]
    assert_linear(visits[0], visits[1], "hidden-region stack visits")
    assert_linear(lines[0], lines[1], "HTML parser lines")


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("html paragraphs", lambda n: many_paragraphs_html(n)),
        ("html deep nesting", lambda n: ("<div>" * n + "<p>x</p>" + "</div>" * n).encode()),
        ("markdown headings", lambda n: "".join(f"## Part {i}\n\nText {i}.\n\n" for i in range(n)).encode()),
        ("markdown unclosed fence", lambda n: ("```\n" + "code line\n" * n).encode()),
    ],
)
def test_parser_work_is_linear(name: str, make) -> None:  # noqa: ANN001
    n = 1500
    mods = [pipeline.parsers, pipeline.htmltext, html.parser]
    work = [lines_run(lambda k=k: parse(make(k), "x.md" if "markdown" in name else "x.html"), mods) for k in (n, 2 * n)]
    assert_linear(work[0], work[1], name)
