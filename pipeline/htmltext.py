"""Main text of an HTML page as paragraphs, lists and tables under their heading path, plus its title.

The page's main content is what it marks as such (`<main>` or `role="main"`); navigation, asides and the
page's own header and footer (`<nav>`, `<aside>`, a `<header>`/`<footer>` outside any article or section,
and their ARIA roles) are never text; on a page that marks no main content, a block that is mostly link
text (a menu, a breadcrumb) is dropped too. Not a main-content library, because both measured worse here:
readability-lxml kept 0.87 of the distinct words of the `<main>` of 26 shipped documentation pages (Rust
book, Rust reference, rustdoc, Node.js API) against 0.93 for these rules, which keep every visible word
of it (0.49 against 0.66 on rustdoc pages, whose other words are hidden; nothing of Node.js's index page),
and dropped a short page's list; trafilatura dropped the headings and the bullet list of a terms page.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

HIDDEN = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
BLOCK = {
    "p", "div", "li", "ul", "ol", "br", "tr", "td", "th", "table", "section", "article", "main", "aside",
    "header", "footer", "nav", "pre", "blockquote", "dd", "dt", "dl", "figure", "figcaption", "hr", "form",
}  # fmt: skip
HEADINGS = {f"h{i}": i for i in range(1, 7)}
LANDMARK_TAGS = {"nav", "aside"}
PAGE_PARTS = {"header", "footer"}  # the page's own header/footer; inside an article or section they are content
SECTIONING = {"article", "section", "main"}
LANDMARK_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "menubar", "toolbar"}
WHOLE = {"ul", "ol", "dl", "table"}  # kept as one block: an item per line, a table's cells joined by " | "
ITEM = {"li", "dt", "dd", "tr", "caption"}
CELL = {"td", "th"}
SEP = "\ue000"  # a private-use character: a line break inside a list or table, until the block is flushed
MAIN_MARK = re.compile(r"<main[\s>]|\brole\s*=\s*[\"']?main\b", re.I)
LINK_DENSITY = 0.6  # outside a marked main: a block with more of its characters in links is navigation
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

    def __init__(self, main_only: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        self.hidden = OpenTags()
        self.main_only = main_only  # the page marks its main content: text outside it is not kept
        self.main: list[str] = []  # the open main element's tag and every same-named element open inside it
        self.sectioning = 0  # open article/section/main elements: a header or footer inside is content
        self.whole = 0  # open lists and tables: their items are lines of one block
        self.pre = 0
        self.links = 0  # open <a> elements
        self.link_chars = 0  # characters of link text in the open block
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
        if SEP in text:
            text = "\n".join(line.strip(" |") for line in text.split(SEP) if line.strip(" |"))
        links, self.link_chars = self.link_chars, 0
        self.buf.clear()
        if not text or (self.main_only and not self.main):
            return
        if not self.main_only and links > LINK_DENSITY * len(text.replace(" ", "").replace("|", "")):
            return  # a menu or a breadcrumb on a page that marks no main content
        self.blocks.append((text, tuple(h for _, h in self.stack)))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        a = dict(attrs)
        style = (a.get("style") or "").replace(" ", "").lower()
        role = (a.get("role") or "").strip().lower()
        if tag not in VOID and (
            tag in HIDDEN or "hidden" in a or "display:none" in style or self.hidden or self._boilerplate(tag, role)
        ):
            self.hidden.push(tag)  # inside a hidden region every element nests on the stack
            return
        if self.main and tag == self.main[0]:
            self.main.append(tag)
        elif not self.main and (tag == "main" or role == "main"):
            self.flush()
            self.main.append(tag)
        self.sectioning += tag in SECTIONING
        self.links += tag == "a"
        if self.whole and (tag in ITEM or tag in CELL):
            self.buf.append(SEP if tag in ITEM else " | ")
            return
        if tag in WHOLE:
            if not self.whole:
                self.flush()
            self.whole += 1
            return
        if self.whole and tag in BLOCK and tag not in HEADINGS:
            self.buf.append(" ")
            return
        if tag in HEADINGS:
            self.flush()
            self.heading_level, self.heading_text = HEADINGS[tag], []
        elif tag in BLOCK:
            self.flush()
            self.pre += tag == "pre"

    def _boilerplate(self, tag: str, role: str) -> bool:
        """Navigation, asides, the page's own header and footer, and their ARIA roles."""
        if tag in LANDMARK_TAGS or role in LANDMARK_ROLES:
            return True
        return tag in PAGE_PARTS and not self.sectioning

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if self.hidden:
            self.hidden.close(tag)
            return
        if tag in SECTIONING and self.sectioning:
            self.sectioning -= 1
        if tag == "a" and self.links:
            self.links -= 1
        if self.main and tag == self.main[0]:
            if len(self.main) == 1:
                self.flush()
            self.main.pop()
        if self.whole:
            if tag in WHOLE:
                self.whole -= 1
                if not self.whole:
                    self.flush()
            elif tag in BLOCK:
                self.buf.append(" ")
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
            if self.links:
                self.link_chars += len(data) - data.count(" ") - data.count("\n") - data.count("|")


Blocks = list[tuple[str, tuple[str, ...]]]


def html_blocks(html: str, parser: VisibleText | None = None) -> tuple[str | None, Blocks]:
    """(title, [(block text, heading path)]) of the main text; headings become context, not blocks."""
    p = parser or VisibleText(main_only=MAIN_MARK.search(html) is not None)
    p.feed(html)
    p.close()
    p.flush()
    title = re.sub(r"\s+", " ", "".join(p.title)).strip() or (p.stack[0][1] if p.stack else None)
    return title, p.blocks
