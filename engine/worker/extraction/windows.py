"""Long texts as overlapping word windows, and the windows' entities merged back into one list per text.

GLiNER reads at most a few hundred words (and its encoder a few hundred tokens, labels included). A longer
text is cut on word boundaries into windows that each fit both limits and share `overlap` words with the
next, so an entity cut by one window's edge is whole in its neighbour. Every word is in some window: no
text is dropped. Merging keeps each (span, label) once with its best score, then resolves overlaps the way
GLiNER's own decoder does (highest score first; flat: no overlap; nested: nesting but no crossing).
Planning and merging are linear in the text's length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WordRange:
    """Words [first, last) of a text, and the tokens they take."""

    first: int
    last: int
    tokens: int


@dataclass(frozen=True)
class Found:
    """An entity in a text's word indices: first and last word (inclusive), label, score."""

    start: int
    end: int
    label: str
    score: float


def plan_windows(counts: Sequence[int], max_words: int, overlap: int, room: int) -> list[WordRange]:
    """Windows over words with these token counts: each at most `max_words` words and `room` tokens (a single
    word longer than `room` gets a window of its own), consecutive windows sharing up to `overlap` words
    (never more than half a window, so each window moves on). The last window reaches back as far as the
    limits allow, so the text's tail is read with as much context as the rest."""
    n = len(counts)
    windows: list[WordRange] = []
    i = 0
    while i < n:
        j, tokens = i, 0
        while j < n and j - i < max_words and (j == i or tokens + counts[j] <= room):
            tokens += counts[j]
            j += 1
        if j >= n and windows:  # the tail: widen it backwards, past the previous window's start at most
            floor = windows[-1].first + 1
            while i > floor and j - i < max_words and tokens + counts[i - 1] <= room:
                i -= 1
                tokens += counts[i]
        windows.append(WordRange(i, j, tokens))
        if j >= n:
            break
        i = j - min(overlap, (j - i) // 2)
    return windows


def _conflicts(a: Found, b: Found, flat: bool, multi_label: bool) -> bool:
    """GLiNER's rule: the same span twice only with multi_label; otherwise flat forbids any overlap and
    nested forbids crossing."""
    if (a.start, a.end) == (b.start, b.end):
        return not multi_label
    disjoint = a.start > b.end or b.start > a.end
    if flat:
        return not disjoint
    nested = (a.start <= b.start and a.end >= b.end) or (b.start <= a.start and b.end >= a.end)
    return not (disjoint or nested)


def merge(parts: Iterable[tuple[int, Iterable[Found]]], flat: bool, multi_label: bool) -> list[Found]:
    """One text's entities from its windows' (first word, entities relative to the window): duplicates at the
    overlaps kept once with their best score, overlaps resolved greedily by score, sorted by position."""
    best: dict[tuple[int, int, str], float] = {}
    for offset, found in parts:
        for f in found:
            key = (offset + f.start, offset + f.end, f.label)
            if f.score > best.get(key, -1.0):
                best[key] = f.score
    ranked = sorted(best.items(), key=lambda kv: -kv[1])  # stable: ties keep window order
    width = max((end - start for (start, end, _), _ in ranked), default=0)
    kept: dict[int, list[Found]] = {}  # start word -> kept entities starting there
    out: list[Found] = []
    for (start, end, label), score in ranked:
        cand = Found(start, end, label, score)
        # a kept entity can touch [start, end] only if it starts within `width` words before it
        near = (k for s in range(start - width, end + 1) for k in kept.get(s, ()))
        if any(_conflicts(cand, k, flat, multi_label) for k in near):
            continue
        kept.setdefault(start, []).append(cand)
        out.append(cand)
    out.sort(key=lambda f: (f.start, f.end))
    return out
