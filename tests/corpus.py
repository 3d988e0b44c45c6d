"""Generated document folders (PDF via pymupdf, Markdown, HTML, text): test data for tests, bench and examples."""

from __future__ import annotations

import contextlib
import html
import random
from pathlib import Path

import pymupdf

CSS = "h1 {font-size: 20pt;} h2 {font-size: 15pt;} h3 {font-size: 12.5pt;} p {font-size: 10.5pt;}"
Section = tuple[str, list[str]]  # (heading, paragraphs)


def html_to_pdf(body_html: str, out: Path, title: str, outline: bool = False, page_height: float = 842) -> int:
    """Lay HTML out on pages with pymupdf's Story; optionally write an outline from the headings. Returns pages."""
    story = pymupdf.Story(html=body_html, user_css=CSS)
    writer = pymupdf.DocumentWriter(str(out))
    mediabox = pymupdf.Rect(0, 0, 595, page_height)
    more = True
    while more:
        dev = writer.begin_page(mediabox)
        more, _ = story.place(mediabox + (56, 56, -56, -56))
        story.draw(dev)
        writer.end_page()
    writer.close()
    doc = pymupdf.open(str(out))
    doc.set_metadata({"title": title})
    if outline:
        toc = []
        for pno, page in enumerate(doc, start=1):
            for b in page.get_text("dict")["blocks"]:
                for line in b.get("lines", []):
                    size = max(s["size"] for s in line["spans"])
                    text = "".join(s["text"] for s in line["spans"]).strip()
                    level = 1 if size >= 19 else 2 if size >= 14 else 3 if size >= 12 else 0
                    if level and text:
                        toc.append([level, text, pno])
        doc.set_toc(toc)
    with contextlib.suppress(Exception):  # subsetting only makes the file smaller
        doc.subset_fonts()
    pages = doc.page_count
    tmp = out.with_name(out.name + ".tmp")
    doc.save(str(tmp), garbage=3, deflate=True)
    doc.close()
    tmp.replace(out)
    return pages


def sections_html(title: str, sections: list[Section]) -> str:
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for heading, paras in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        parts += [f"<p>{html.escape(p)}</p>" for p in paras]
    return "\n".join(parts)


def write_doc(path: Path, kind: str, title: str, sections: list[Section]) -> Path:
    """One document of a kind (pdf, markdown, html, text) with a title and sections."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "pdf":
        html_to_pdf(sections_html(title, sections), path, title, page_height=500)
    elif kind == "markdown":
        body = "\n\n".join(f"## {h}\n\n" + "\n\n".join(ps) for h, ps in sections)
        path.write_text(f"# {title}\n\n{body}\n")
    elif kind == "html":
        page = f"<!DOCTYPE html><html><head><title>{html.escape(title)}</title></head><body>"
        path.write_text(page + sections_html(title, sections) + "</body></html>\n")
    else:
        path.write_text(f"{title}\n\n" + "\n\n".join(p for _, ps in sections for p in ps) + "\n")
    return path


SUBJECTS = ["The pump", "The harbour crane", "Each berth", "The ferry", "The survey team", "The tenant",
            "The controller", "The backup generator", "Every rider", "The warehouse"]  # fmt: skip
VERBS = ["inspects", "reports", "replaces", "logs", "measures", "records", "checks", "calibrates", "cleans", "stores"]
OBJECTS = ["the pressure valve", "the mooring lines", "the fuel filter", "the water samples", "the tide gauge",
           "the bearing housing", "the dock lights", "the safety rail", "the cooling circuit", "the signal lamp"]  # fmt: skip
WHEN = ["every morning", "after each storm", "before the season", "weekly", "at every shift change",
        "when the alarm sounds", "once a month", "after 500 hours", "at low tide", "before departure"]  # fmt: skip


def sentence(rng: random.Random) -> str:
    code = f" (ref {rng.choice('ABCDEFGH')}-{rng.randint(100, 999)})" if rng.random() < 0.2 else ""
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(WHEN)}{code}."


def random_sections(rng: random.Random, n_sections: int, paras: int, sentences: int) -> list[Section]:
    return [
        (
            f"Section {i + 1}: {rng.choice(OBJECTS)}",
            [" ".join(sentence(rng) for _ in range(sentences)) for _ in range(paras)],
        )
        for i in range(n_sections)
    ]


def make_corpus(dest: Path, n_docs: int, seed: int = 0, sections: int = 4) -> list[Path]:
    """A folder of n_docs documents, a quarter of each kind, reproducible from the seed."""
    rng = random.Random(seed)
    kinds = [("pdf", "pdf"), ("markdown", "md"), ("html", "html"), ("text", "txt")]
    out = []
    for i in range(n_docs):
        kind, ext = kinds[i % 4]
        out.append(write_doc(dest / f"doc-{i:04d}.{ext}", kind, f"Document {i}", random_sections(rng, sections, 2, 4)))
    return out
