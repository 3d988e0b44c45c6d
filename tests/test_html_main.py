"""HTML main content: navigation, banners, asides and footers are never chunks; lists and tables stay whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.chunking import Chunker
from pipeline.config import ChunkConfig, PipelineConfig
from pipeline.parsers import parse

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
CHROME = ("Home", "Plans", "Sign in", "Contact us", "Related stations", "Copyright", "Skip to content")

PAGE = """<!DOCTYPE html><html><head><title>Harbour pumps</title></head><body>
<a href="#main">Skip to content</a>
<header><a href="/">Home</a> | <a href="/plans">Plans</a> | <a href="/login">Sign in</a></header>
<nav><ul><li><a href="/a">Pumps</a></li><li><a href="/b">Valves</a></li></ul></nav>
<aside><h2>Related stations</h2><p>North quay, south quay and the ferry ramp.</p></aside>
<main id="main"><article>
<header><h1>Harbour pumps</h1></header>
<p>The harbour runs four bilge pumps that keep the dry dock empty during repairs.</p>
<h2>Parts the crew may not replace</h2>
<p>Some parts are replaced only by the manufacturer's engineers:</p>
<ul><li>the impeller shaft</li><li>the mechanical seal housing</li><li>the motor controller board</li></ul>
<h2>Flow rates</h2>
<table><tr><th>Pump</th><th>Flow</th></tr><tr><td>P1</td><td>40 m3/h</td></tr><tr><td>P2</td><td>55 m3/h</td></tr></table>
</article></main>
<footer><p>Copyright 2026 Harbour Authority. <a href="/contact">Contact us</a></p></footer>
</body></html>"""


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    from engine.model.tokenizer import tokenizer_for

    tok = tokenizer_for(MODEL)
    return Chunker(tok.tokenizer, tok.max_len, ChunkConfig(target_tokens=40, overlap_tokens=0))


def _no_chrome(texts: list[str]) -> None:
    for text in texts:
        assert not any(w in text for w in CHROME), text


def test_no_navigation_header_footer_or_aside_chunk(chunker: Chunker) -> None:
    doc = parse(PAGE.encode(), "pumps.html")
    chunks = chunker.chunk(doc, "pumps.html")
    assert doc.title == "Harbour pumps" and chunks
    _no_chrome([c.text for c in chunks] + [c.embed_text for c in chunks])
    assert any("four bilge pumps" in c.text for c in chunks)  # the article's own header stays content
    assert all(c.headings[:1] == ("Harbour pumps",) for c in chunks)


def test_a_list_and_a_table_are_one_chunk_each_with_their_heading_in_the_embedded_text(chunker: Chunker) -> None:
    chunks = chunker.chunk(parse(PAGE.encode(), "pumps.html"), "pumps.html")
    items = [c for c in chunks if "impeller shaft" in c.text]
    assert len(items) == 1
    (lst,) = items
    assert "the mechanical seal housing\nthe motor controller board" in lst.text  # one item per line, whole
    assert "Parts the crew may not replace" not in lst.text  # the stored text is the page's text
    assert lst.embed_text.startswith("Harbour pumps > Parts the crew may not replace\n\n")
    (table,) = [c for c in chunks if "P1" in c.text]
    assert "Pump | Flow\nP1 | 40 m3/h\nP2 | 55 m3/h" in table.text


def test_a_page_without_landmarks_drops_its_link_menus(chunker: Chunker) -> None:
    page = (
        "<html><body><div class='menu'><a href='/'>Home</a> | <a href='/p'>Plans</a> | <a href='/s'>Sign in</a></div>"
        "<h1>Day pass</h1><p>The day pass costs 9 dollars; see <a href='/fees'>fees</a> for late returns.</p>"
        "<div><ul><li><a href='/c'>Contact us</a></li><li><a href='/r'>Related stations</a></li></ul></div>"
        "</body></html>"
    )
    chunks = chunker.chunk(parse(page.encode(), "pass.html"), "pass.html")
    assert [c.text for c in chunks] == ["The day pass costs 9 dollars; see fees for late returns."]


@pytest.mark.slow
def test_a_list_answer_is_found_by_its_sections_words(tmp_path: Path) -> None:
    import shoal
    from pipeline import ingest, search

    root = tmp_path / "site"
    root.mkdir()
    (root / "pumps.html").write_text(PAGE)
    filler = "<p>The {0} is inspected every {1} days by the duty engineer, who logs its state in the harbour book.</p>"
    for part in ("crane", "gate", "winch", "fender", "bollard", "ramp"):
        body = "".join(filler.format(part, 7 * (k + 1)) for k in range(6))
        (root / f"{part}.html").write_text(f"<html><body><main><h1>The {part}</h1>{body}</main></body></html>")
    db = f"lancedb://{tmp_path / 'db'}"
    with shoal.Engine() as engine:
        assert ingest(root, PipelineConfig(db=db), client=engine).ok
        hits = search("Which parts may the crew not replace?", db=db, top_k=3, client=engine)
    assert any("the motor controller board" in h.text for h in hits), [h.text for h in hits]
    _no_chrome([h.text for h in hits])
