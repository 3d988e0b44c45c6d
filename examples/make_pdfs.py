"""Render the HTML sources in examples/pdf_sources into the PDFs of examples/docs (pymupdf Story layout).

A maintainer's tool, run from a checkout: the layout helper lives with the generated test data in tests/corpus.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from tests.corpus import html_to_pdf  # noqa: E402 - after the checkout's root is on the path


def main(dest: Path = HERE / "docs") -> None:
    dest.mkdir(parents=True, exist_ok=True)
    src = HERE / "pdf_sources"
    # headings from font sizes (no outline) in one, from the PDF outline in the other
    html_to_pdf((src / "pt400-pump-manual.html").read_text(), dest / "pt400-pump-manual.pdf", "PT-400 Service Manual",
                outline=False, page_height=500)  # fmt: skip
    html_to_pdf((src / "harbour-lease.html").read_text(), dest / "harbour-lease.pdf", "Commercial Lease Agreement",
                outline=True, page_height=420)  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "docs")
