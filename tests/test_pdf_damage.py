"""A damaged PDF (cut body, broken xref) is reported as damaged with its reason, never as a text-less scan."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

from pipeline.parsers import ParseError, parse
from tests.corpus import html_to_pdf

BODY = "<h1>Pump manual</h1>" + "<p>The PT-400 pump is primed before each start; check the seal weekly.</p>" * 40


@pytest.fixture(scope="module")
def pdf(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("pdf") / "manual.pdf"
    html_to_pdf(BODY, out, "Pump manual", page_height=500)
    return out.read_bytes()


def test_pdf_cut_at_3000_bytes_is_damaged_not_scanned(pdf: bytes) -> None:
    assert len(pdf) > 6000 and parse(pdf, "manual.pdf").blocks  # the whole file has text
    with pytest.raises(ParseError) as e:
        parse(pdf[:3000], "manual.pdf")
    msg = str(e.value)
    assert msg.startswith("damaged PDF") and "%%EOF" in msg, msg
    assert "scanned" not in msg


def test_pdf_with_a_broken_xref_and_its_text_is_ingested_with_a_warning(pdf: bytes) -> None:
    cut = pdf[: pdf.rindex(b"startxref")]  # the body is whole, the trailer that points at the xref is gone
    doc = parse(cut, "manual.pdf")
    assert doc.blocks and "PT-400" in doc.blocks[0].text
    assert any(w.startswith("damaged PDF repaired") for w in doc.warnings), doc.warnings
    assert not parse(pdf, "manual.pdf").warnings  # the intact file warns of nothing


def test_pdf_whose_pages_hold_no_text_is_not_called_damaged() -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    page.draw_rect(pymupdf.Rect(50, 50, 200, 200), color=(0, 0, 0), fill=(0.5, 0.5, 0.5))  # a drawing, no text
    with pytest.raises(ParseError, match="no text found in the pdf document") as e:
        parse(doc.tobytes(), "scan.pdf")
    assert "damaged" not in str(e.value)


def test_unopenable_pdf_is_damaged(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="damaged PDF: it cannot be opened"):
        parse(b"%PDF-1.7\n garbage that is not a pdf", "x.pdf")
