"""Parsers, sniffing, chunking and the folder walk (no engine needed; the real MiniLM tokenizer)."""

from __future__ import annotations

import os
from pathlib import Path

import pymupdf
import pytest

from pipeline.chunking import Chunker
from pipeline.config import ChunkConfig, ConfigError, SourceConfig, load_config
from pipeline.parsers import ParseError, parse, sniff
from pipeline.sources import glob_match, walk
from tests.corpus import html_to_pdf

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def tok():
    from engine.model.tokenizer import tokenizer_for

    return tokenizer_for(MODEL)


def test_sniff_by_content_not_extension(tmp_path: Path) -> None:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "hello pdf")
    pdf = doc.tobytes()
    assert sniff(pdf, "report.txt") == "pdf"
    assert sniff(b"<!DOCTYPE html><html><p>x</p></html>", "page.txt") == "html"
    assert sniff(b"# Title\n\ntext", "notes.md") == "markdown"
    assert sniff(b"\x89PNG\r\n\x1a\n....", "image.txt") == "binary"
    assert sniff(b"abc\x00def", "data.txt") == "binary"
    assert parse(pdf, "report.txt").kind == "pdf"


def test_markdown_heading_paths_and_offsets() -> None:
    src = "# Guide\n\nIntro.\n\n## Install\n\nStep one.\nStep two.\n\n```\n# not a heading\n```\n\nSetext\n------\n\nBody.\n"
    doc = parse(src.encode(), "g.md")
    assert doc.title == "Guide"
    got = [(b.text, b.headings) for b in doc.blocks]
    assert got == [
        ("Intro.", ("Guide",)),
        ("Step one.\nStep two.", ("Guide", "Install")),
        ("```\n# not a heading\n```", ("Guide", "Install")),
        ("Body.", ("Guide", "Setext")),
    ]
    for b in doc.blocks:
        assert src[b.start : b.end] == b.text


def test_markdown_heading_closing_sequences() -> None:
    src = "# Guide ##\n\n## C# notes\n\nA.\n\n### Tabs\t#\t\n\nB.\n\n#### ###\n\nC.\n\n####### seven\n"
    doc = parse(src.encode(), "g.md")
    assert [(b.text, b.headings) for b in doc.blocks] == [
        ("A.", ("Guide", "C# notes")),
        ("B.", ("Guide", "C# notes", "Tabs")),
        ("C.", ("Guide", "C# notes", "Tabs", "#")),
        ("####### seven", ("Guide", "C# notes", "Tabs", "#")),  # seven #s: a paragraph, as in CommonMark
    ]


def test_invalid_utf16_fails_or_is_replaced() -> None:
    data = "\ufeffhello".encode("utf-16-le")[:-1] + b"\x00\xd8"  # ends in a lone high surrogate
    with pytest.raises(ParseError, match="invalid UTF-16"):
        parse(b"\xff\xfe" + data[2:], "u.txt")
    doc = parse(b"\xff\xfe" + data[2:], "u.txt", invalid_utf8="replace")
    assert "\ufffd" in doc.blocks[0].text and "invalid UTF-16" in doc.warnings[0]


def test_lone_surrogates_never_leave_the_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    # pymupdf cannot be made to write such a text map here, so a stand-in parser yields what a broken one would
    import pipeline.parsers as parsers
    from pipeline.document import Block, Document

    bad = Document("text", [Block("ok \ud800 text", 0, 12, None, ("H\udfff",)), Block("fine", 14, 18)], "T\ud801")
    monkeypatch.setitem(parsers.PARSERS, "text", lambda data, invalid: bad)
    doc = parse(b"anything", "x.txt")
    assert doc.blocks[0].text == "ok \ufffd text" and doc.blocks[0].headings == ("H\ufffd",)
    assert doc.title == "T\ufffd" and "lone surrogate" in doc.warnings[0]
    for b in doc.blocks:
        b.text.encode("utf-8")


def test_html_visible_text_title_headings() -> None:
    page = (
        "<html><head><title>T</title><script>var hidden=1</script><style>p{}</style></head><body>"
        "<h1>Top</h1><p>Hello <b>bold</b> &amp; more</p><div hidden><p>secret</p></div>"
        "<h2>Sub</h2><ul><li>one</li><li>two</li></ul><p style='display: none'>gone</p></body></html>"
    )
    doc = parse(page.encode(), "x.html")
    assert doc.title == "T"
    assert [(b.text, b.headings) for b in doc.blocks] == [
        ("Hello bold & more", ("Top",)),
        ("one\ntwo", ("Top", "Sub")),  # a list is one block, an item per line
    ]


def test_pdf_pages_and_headings_from_font_sizes_and_outline(tmp_path: Path) -> None:
    body = "<h1>Manual</h1><h2>Setup</h2>" + "<p>Setup text paragraph.</p>" * 30 + "<h2>Errors</h2><p>E-9 is bad.</p>"
    for outline in (False, True):
        out = tmp_path / f"m{outline}.pdf"
        pages = html_to_pdf(body, out, "Manual", outline=outline, page_height=400)
        assert pages >= 2
        doc = parse(out.read_bytes(), out.name)
        assert doc.pages == pages
        last = doc.blocks[-1]
        assert last.text == "E-9 is bad." and last.headings == ("Manual", "Errors") and last.page == pages
        assert doc.blocks[0].headings == ("Manual", "Setup") and doc.blocks[0].page == 1


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file"),
        (b"   \n\n", "empty"),
        (b"%PDF-1.7\n garbage that is not a pdf", "damaged PDF"),
        (b"\x7fELF\x02\x01\x01\x00binary", "binary content"),
        (b"caf\xe9 au lait", "invalid UTF-8 at byte 3"),
    ],
)
def test_unparseable_inputs_have_reasons(data: bytes, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse(data, "f.txt")


def test_encrypted_pdf_reason() -> None:
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "secret")
    data = doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="u", owner_pw="o")
    with pytest.raises(ParseError, match="encrypted"):
        parse(data, "s.pdf")


def test_invalid_utf8_replace_mode_warns() -> None:
    doc = parse(b"caf\xe9 au lait", "f.txt", invalid_utf8="replace")
    assert "\ufffd" in doc.blocks[0].text and "invalid UTF-8" in doc.warnings[0]


def test_chunks_respect_target_overlap_and_max_len(tok) -> None:
    sentences = [f"Sentence {i} talks about valve number {i * 7} and its pressure rating." for i in range(60)]
    md = "# Guide\n\n## Valves\n\n" + " ".join(sentences) + "\n\n## Other\n\nShort.\n"
    doc = parse(md.encode(), "g.md")
    cfg = ChunkConfig(target_tokens=80, overlap_tokens=20)
    chunks = Chunker(tok.tokenizer, tok.max_len, cfg).chunk(doc, "/r/g.md")
    valves = [c for c in chunks if c.headings == ("Guide", "Valves")]
    assert len(valves) >= 5
    count = Chunker(tok.tokenizer, tok.max_len, cfg).count
    for c in valves:
        assert count([c.text])[0] <= 80
        assert c.embed_text.startswith("Guide > Valves\n\n")
        assert md[c.start : c.end].startswith(c.text[:20])
    for a, b in zip(valves, valves[1:], strict=False):
        assert b.text.split(". ")[0] in a.text, "consecutive chunks overlap by whole sentences"
    assert chunks[-1].text == "Short." and chunks[-1].headings == ("Guide", "Other")
    assert len({c.id for c in chunks}) == len(chunks)
    # deterministic ids: same input, same ids
    again = Chunker(tok.tokenizer, tok.max_len, cfg).chunk(doc, "/r/g.md")
    assert [c.id for c in again] == [c.id for c in chunks]


def test_no_chunk_over_model_max_length(tok) -> None:
    long_sentence = " ".join(f"word{i}" for i in range(3000))  # one 'sentence' far over 256 tokens
    doc = parse(("# H\n\n" + long_sentence).encode(), "x.md")
    chunker = Chunker(tok.tokenizer, tok.max_len, ChunkConfig(target_tokens=1000, overlap_tokens=0))
    chunks = chunker.chunk(doc, "x")
    assert len(chunks) > 5
    full = tok([c.embed_text for c in chunks], truncate=False)  # raises if any is over max length
    assert max(len(ids) for ids in full) <= tok.max_len
    joined = " ".join(c.text for c in chunks)
    assert joined.split() == long_sentence.split(), "nothing lost when a sentence is split at token offsets"


def test_glob_and_walk(tmp_path: Path) -> None:
    assert glob_match("a/b/c.md", "**/*.md") and glob_match("c.md", "**/*.md")
    assert glob_match("x/.git", ".*") and not glob_match("x/a.md", ".*")
    (tmp_path / "docs/sub").mkdir(parents=True)
    (tmp_path / "docs/a.md").write_text("a")
    (tmp_path / "docs/sub/b.txt").write_text("b")
    (tmp_path / "docs/c.bin").write_bytes(b"\0")
    (tmp_path / "docs/.hidden").mkdir()
    (tmp_path / "docs/.hidden/d.md").write_text("d")
    w = walk(tmp_path / "docs", SourceConfig())
    assert [f.rel for f in w.files] == ["a.md", "sub/b.txt"] and w.complete
    w = walk(tmp_path / "docs", SourceConfig(include=["**/*"], exclude=["sub"]))
    assert [f.rel for f in w.files] == [".hidden/d.md", "a.md", "c.bin"]  # exclude replaces the defaults


def test_walk_refuses_symlinks_out_of_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("do not ingest")
    root = tmp_path / "root"
    (root / "inner").mkdir(parents=True)
    (root / "inner/ok.md").write_text("fine")
    os.symlink(outside, root / "escape_dir")
    os.symlink(outside / "secret.md", root / "escape.md")
    os.symlink(root / "inner/ok.md", root / "alias.md")  # inside the root: followed
    os.symlink(root, root / "inner/loop")  # a loop inside the root: visited once
    w = walk(root, SourceConfig())
    rels = [f.rel for f in w.files]
    assert "alias.md" in rels and "inner/ok.md" in rels
    assert not any("secret" in r or "escape" in r for r in rels)
    skipped = dict(w.skipped)
    assert set(skipped) == {"escape.md", "escape_dir", "inner/loop"}
    assert "outside the root" in skipped["escape.md"] and "outside the root" in skipped["escape_dir"]
    assert "already walked" in skipped["inner/loop"]  # listed with why, not left out silently


def test_walk_of_missing_root_is_incomplete(tmp_path: Path) -> None:
    w = walk(tmp_path / "unmounted", SourceConfig())
    assert not w.complete and w.files == [] and "not a folder" in w.errors[0][1]


def test_config_validation(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("chunking: {target_tokens: 100, overlap_tokens: 150}\n")
    with pytest.raises(ConfigError, match="overlap_tokens"):
        load_config(p)
    p.write_text("steps: [{kind: entities, model: x}]\n")
    with pytest.raises(ConfigError, match="needs labels|exactly one dense"):
        load_config(p)
    t = tmp_path / "c.toml"
    t.write_text('collection = "notes"\n[chunking]\ntarget_tokens = 120\n')
    cfg = load_config(t)
    assert cfg.collection == "notes" and cfg.chunking.target_tokens == 120
    assert cfg.fingerprint() != load_config().fingerprint()
