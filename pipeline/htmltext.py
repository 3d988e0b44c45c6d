"""Visible text of an HTML page as paragraphs under their heading path, plus its title (stdlib parser)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

HIDDEN = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
BLOCK = {
    "p", "div", "li", "ul", "ol", "br", "tr", "td", "th", "table", "section", "article", "main", "aside",
    "header", "footer", "nav", "pre", "blockquote", "dd", "dt", "dl", "figure", "figcaption", "hr", "form",
}  # fmt: skip
HEADINGS = {f"h{i}": i for i in range(1, 7)}
VOID = {"br", "hr", "img", "meta", "link", "input", "area", "base", "col", "embed", "source", "track", "wbr"}


class OpenTags:
    """The elements open inside a hidden region: a stack plus a count per tag, so closing is O(1) amortised.

    An end tag whose element is not open costs one lookup (no scan of the stack); one that is open pops
    down to it. `work` counts pushes, pops and lookups: it grows linearly with the tags fed.
    """

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.open: dict[str, int] = {}
        self.work = 0

    def __bool__(self) -> bool:
        return bool(self.stack)

    def push(self, tag: str) -> None:
        self.work += 1
        self.stack.append(tag)
        self.open[tag] = self.open.get(tag, 0) + 1

    def close(self, tag: str) -> None:
        """Close `tag` and every element opened after it; an end tag with nothing open to close is ignored."""
        self.work += 1
        if not self.open.get(tag):
            return
        while True:
            self.work += 1
            top = self.stack.pop()
            self.open[top] -= 1
            if top == tag:
                return


class VisibleText(HTMLParser):
    """Collects the visible text blocks, the heading path and the title while the stdlib parser feeds it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hidden = OpenTags()
        self.pre = 0
        self.in_title = False
        self.title: list[str] = []
        self.heading_level: int | None = None
        self.heading_text: list[str] = []
        self.stack: list[tuple[int, str]] = []
        self.buf: list[str] = []
        self.blocks: list[tuple[str, tuple[str, ...]]] = []

    def flush(self) -> None:
        raw = "".join(self.buf)
        text = raw.strip() if self.pre else re.sub(r"\s+", " ", raw).strip()
        if text:
            self.blocks.append((text, tuple(h for _, h in self.stack)))
        self.buf.clear()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        a = dict(attrs)
        style = (a.get("style") or "").replace(" ", "").lower()
        if tag not in VOID and (tag in HIDDEN or "hidden" in a or "display:none" in style or self.hidden):
            self.hidden.push(tag)  # inside a hidden region every element nests on the stack
            return
        if tag in HEADINGS:
            self.flush()
            self.heading_level, self.heading_text = HEADINGS[tag], []
        elif tag in BLOCK:
            self.flush()
            self.pre += tag == "pre"

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if self.hidden:
            self.hidden.close(tag)
            return
        if tag in HEADINGS and self.heading_level is not None:
            name = re.sub(r"\s+", " ", "".join(self.heading_text)).strip()
            level, self.heading_level = self.heading_level, None
            if name:
                while self.stack and self.stack[-1][0] >= level:
                    self.stack.pop()
                self.stack.append((level, name))
        elif tag in BLOCK:
            self.flush()
            self.pre -= tag == "pre" and self.pre > 0

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        if self.hidden:
            return
        if self.heading_level is not None:
            self.heading_text.append(data)
        else:
            self.buf.append(data)


def html_blocks(html: str, parser: VisibleText | None = None) -> tuple[str | None, list[tuple[str, tuple[str, ...]]]]:
    """(title, [(paragraph text, heading path)]) of the visible text; headings become context, not blocks."""
    p = parser or VisibleText()
    p.feed(html)
    p.close()
    p.flush()
    title = re.sub(r"\s+", " ", "".join(p.title)).strip() or (p.stack[0][1] if p.stack else None)
    return title, p.blocks
