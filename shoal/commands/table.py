"""A plain-text table that fits a width: the first column is never cut or wrapped, the others wrap at spaces.

Written out (no rich) so its layout is exact when piped, and cheap to import.
"""

from __future__ import annotations

import re
import shutil
import textwrap

GAP = "  "
PATH_BREAK = re.compile(r"(?<=[/\\])")  # a long path folds after a separator, never inside a name


def _shrink(natural: list[int], floor: list[int], room: int, first: int | None = None) -> list[int]:
    """Narrow columns until the sum fits room: column `first` (if any) before the others, then the one with
    the most slack; never column 0, never below a column's floor."""
    widths = list(natural)
    while sum(widths) > room:
        cands = [i for i in range(1, len(widths)) if widths[i] > floor[i]]
        if first in cands:
            cands = [first]
        if not cands:
            break
        i = max(cands, key=lambda j: widths[j] - floor[j])
        widths[i] -= 1
    return widths


def render(headers: list[str], rows: list[list[str]], width: int = 80, fold_last: bool = False) -> str:
    """The table as text: a header line, a rule, then each row (wrapped cells spill onto extra lines).
    With `fold_last`, the last column (paths, reasons) may also break a long path after a `/`."""
    cols = len(headers)
    cells = [[headers[i], *(r[i] for r in rows)] for i in range(cols)]
    natural = [max(len(c) for c in col) for col in cells]
    # headers whole, and no word cut: words split at plain spaces only, so a no-break space (a date and its
    # time) keeps its cell on one line
    floor = [max([len(col[0])] + [len(w) for c in col[1:] for w in c.split(" ")]) for col in cells]
    if fold_last and cols > 1:
        floor[-1] = min(floor[-1], max(len(headers[-1]), 16))
    widths = _shrink(natural, floor, width - len(GAP) * (cols - 1), cols - 1 if fold_last else None)

    def lines(row: list[str]) -> list[str]:
        wrapped = [[row[0]]] + [
            (fold(row[i], widths[i]) if fold_last and i == cols - 1 else _wrap(row[i], widths[i])) or [""]
            for i in range(1, cols)
        ]
        height = max(len(w) for w in wrapped)
        out = []
        for n in range(height):
            parts = [(w[n] if n < len(w) else "").ljust(widths[i]) for i, w in enumerate(wrapped)]
            out.append(GAP.join(parts).rstrip())
        return out

    rule = GAP.join("-" * w for w in widths)
    return "\n".join([*lines(headers), rule, *(line for r in rows for line in lines(r))])


def _wrap(text: str, width: int) -> list[str]:
    """Wrap at plain spaces, never after a hyphen inside a word (a date's "2026-12-")."""
    return textwrap.wrap(text, width, break_on_hyphens=False)


def fold(text: str, width: int) -> list[str]:
    """Wrap at spaces; a word longer than the width (a path) breaks after its separators, and only a name
    longer than the whole width is cut inside."""
    pieces: list[tuple[str, bool]] = []  # (text, whether it continues the previous piece's word)
    for word in text.split():
        parts = [word] if len(word) <= width else [p for p in PATH_BREAK.split(word) if p]
        pieces += [(part, n > 0) for n, part in enumerate(parts)]
    out: list[str] = []
    line = ""
    for piece, joined in pieces:
        glue = "" if not line or joined else " "
        if line and len(line) + len(glue) + len(piece) > width:
            out.append(line)
            line, glue = "", ""
        while len(piece) > width:  # one name wider than the column: cut, as nothing else fits
            if line:
                out.append(line)
                line = ""
            out.append(piece[:width])
            piece = piece[width:]
        line += glue + piece
    return [*out, line] if line else out


def terminal_width() -> int:
    """The terminal's width, or 80 when the output is piped (COLUMNS overrides both)."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)
