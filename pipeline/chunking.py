"""Token-counted chunking with the embedding model's own tokenizer, on paragraph and sentence boundaries."""

from __future__ import annotations

import hashlib
import itertools
import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from pipeline.config import ChunkConfig
from pipeline.document import Block, Document

ID_NAMESPACE = uuid.UUID("6f1d2c4e-5b0a-4c7e-9a51-3e0b7c9d2f11")
COUNT_BATCH = 1024
GROUP_BLOCKS = 2048  # blocks split into sentences and counted at once: what a document holds in memory at a time
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=\S)|\n+")


@dataclass
class Chunk:
    """One piece of a document as stored: its text, the text embedded (with heading context), provenance."""

    index: int
    text: str
    embed_text: str
    start: int
    end: int
    pages: list[int]
    headings: tuple[str, ...]
    n_tokens: int
    hash: str = ""
    id: str = ""
    extra: dict[str, object] = field(default_factory=dict)


@dataclass
class _Unit:
    text: str
    start: int
    end: int
    page: int | None
    headings: tuple[str, ...]
    block: int
    tokens: int
    sep: str = " "  # what joins it to the unit before it in its block: a list's or table's line break stays


class Chunker:
    """Packs sentences into chunks of about `target_tokens`, never over the model's max length."""

    def __init__(self, tokenizer: Tokenizer, max_len: int, cfg: ChunkConfig, reserve_text: str = "") -> None:
        self.tok = Tokenizer.from_str(tokenizer.to_str())  # a private copy: counting must not truncate
        self.tok.no_truncation()
        self.tok.no_padding()
        self.cfg = cfg
        self.specials = len(self.tok.encode("", add_special_tokens=True).ids)
        self.reserve = self.count([reserve_text])[0] if reserve_text else 0  # e.g. a document instruction
        self.max_len = max_len

    def count(self, texts: list[str]) -> list[int]:
        """Token counts, COUNT_BATCH texts per tokenizer call: memory stays bounded for any document size."""
        out: list[int] = []
        for i in range(0, len(texts), COUNT_BATCH):
            out += map(len, self.tok.encode_batch(texts[i : i + COUNT_BATCH], add_special_tokens=False))
        return out

    def context(self, headings: tuple[str, ...]) -> str:
        return " > ".join(headings) + "\n\n" if headings and self.cfg.headings == "prepend" else ""

    def _limit(self, headings: tuple[str, ...], ctx_tokens: dict[tuple[str, ...], int]) -> int:
        room = self.max_len - self.specials - self.reserve - ctx_tokens[headings]
        if room < 16:
            raise ValueError(f"heading path {headings!r} leaves no room for text in {self.max_len} tokens")
        return min(self.cfg.target_tokens, room)

    def _units(self, blocks: list[Block], base: int, ctx_tokens: dict[tuple[str, ...], int]) -> list[_Unit]:
        """Sentences with offsets and token counts; a sentence over the limit is split at token offsets.
        `base` is the index of the first of these blocks in the document."""
        pieces: list[tuple[str, int, int, int, str]] = []  # text, start, end, block, separator before it
        for bi, b in enumerate(blocks, start=base):
            pos, sep = 0, " "
            for m in [*SENTENCE_END.finditer(b.text), None]:
                end = m.start() if m else len(b.text)
                s = b.text[pos:end]
                if s.strip():
                    lead = len(s) - len(s.lstrip())
                    s = s.strip()
                    pieces.append((s, b.start + pos + lead, b.start + pos + lead + len(s), bi, sep))
                    sep = " "
                if m is not None and "\n" in m.group(0):
                    sep = "\n"
                pos = m.end() if m else pos
        counts = self.count([p[0] for p in pieces])
        units: list[_Unit] = []
        for (text, start, end, bi, sep), n in zip(pieces, counts, strict=True):
            b = blocks[bi - base]
            limit = self._limit(b.headings, ctx_tokens)
            if n <= limit:  # a piece the tokenizer drops entirely still counts one: a chunk stays bounded
                units.append(_Unit(text, start, end, b.page, b.headings, bi, max(n, 1), sep))
                continue
            offsets = self.tok.encode(text, add_special_tokens=False).offsets
            i = 0
            while i < len(offsets):
                j = min(i + limit, len(offsets))
                k = j
                while j < len(offsets) and k > i + limit // 2 and not text[offsets[k][0] - 1].isspace():
                    k -= 1  # prefer to cut where a word starts
                j = k if j < len(offsets) and k > i + limit // 2 else j
                a, z = offsets[i][0], offsets[j - 1][1]
                units.append(_Unit(text[a:z], start + a, start + z, b.page, b.headings, bi, j - i))
                i = j
        return units

    def chunk(self, doc: Document, source_id: str) -> list[Chunk]:
        """Pack the document's units into chunks in one pass (linear in the number of units)."""
        return [c for window in self.windows(doc.blocks, source_id, len(doc.blocks) + 1) for c in window]

    def windows(self, blocks: Iterable[Block], source_id: str, window: int) -> Iterator[list[Chunk]]:
        """The chunks of a stream of blocks, `window` at a time (the last window may be shorter).

        Blocks are read GROUP_BLOCKS at a time and the packing state carries over, so the chunks are the
        same as for the whole document at once while only a group of blocks and one window of chunks are
        held: memory is bounded by the window, not the document.
        """
        ctx_tokens: dict[tuple[str, ...], int] = {}
        it = iter(blocks)
        cur: list[_Unit] = []
        total, base, index = 0, 0, 0
        ready: list[list[_Unit]] = []
        while group := list(itertools.islice(it, GROUP_BLOCKS)):
            new = list({b.headings for b in group if b.headings not in ctx_tokens})
            ctx_tokens.update(zip(new, self.count([self.context(h) for h in new]), strict=True))
            units = self._units(group, base, ctx_tokens)
            base += len(group)
            left = block_tokens_left(units)
            for i, u in enumerate(units):
                limit = self._limit(u.headings, ctx_tokens)
                new_block = not cur or cur[-1].block != u.block
                if cur and (
                    u.headings != cur[0].headings
                    or total + u.tokens > limit
                    or (new_block and total + left[i] > limit and total >= limit // 2)  # end at a paragraph
                ):
                    ready.append(cur)
                    cur = self._overlap(cur, u, limit) if u.headings == cur[0].headings else []
                    total = sum(x.tokens for x in cur)  # at most overlap_tokens units
                cur.append(u)
                total += u.tokens
            while len(ready) >= window:
                done, ready = finish_ids(self._finish(ready[:window]), source_id, index), ready[window:]
                index += len(done)
                yield from _split(done, window)
        if cur:
            ready.append(cur)
        yield from _split(finish_ids(self._finish(ready), source_id, index), window)

    def _overlap(self, done: list[_Unit], nxt: _Unit, limit: int) -> list[_Unit]:
        """The whole sentences at the end of a finished chunk that start the next one (visits only those)."""
        carry: list[_Unit] = []
        tokens = 0
        for prev in reversed(done):
            if tokens + prev.tokens > self.cfg.overlap_tokens:
                break
            carry.append(prev)
            tokens += prev.tokens
        return [] if tokens + nxt.tokens > limit else carry[::-1]

    def _finish(self, groups: list[list[_Unit]]) -> list[Chunk]:
        """Each group joined into a chunk; all chunks' token counts come from batched tokenizer calls."""
        joined = [self._join(g) for g in groups]
        counts = self.count([embed for _, embed in joined])
        return [
            c
            for g, (text, embed), n in zip(groups, joined, counts, strict=True)
            for c in self._chunk(g, text, embed, n)
        ]

    def _join(self, units: list[_Unit]) -> tuple[str, str]:
        """(text, embed text): sentences of a block joined by a space, blocks by a blank line; heading context."""
        parts = []
        for prev, u in zip([None, *units], units, strict=False):
            parts.append("" if prev is None else u.sep if prev.block == u.block else "\n\n")
            parts.append(u.text)
        text = "".join(parts)
        return text, self.context(units[0].headings) + text

    def _chunk(self, units: list[_Unit], text: str, embed: str, n_text: int) -> list[Chunk]:
        n = n_text + self.specials + self.reserve
        if n > self.max_len and len(units) > 1:  # joins changed the count: split, never truncate (rare)
            half = len(units) // 2
            return [c for part in (units[:half], units[half:]) for c in self._chunk(part, *self._counted(part))]
        pages = sorted({u.page for u in units if u.page is not None})
        return [Chunk(0, text, embed, units[0].start, units[-1].end, pages, units[0].headings, n)]

    def _counted(self, units: list[_Unit]) -> tuple[str, str, int]:
        text, embed = self._join(units)
        return text, embed, self.count([embed])[0]


def _split(chunks: list[Chunk], window: int) -> Iterator[list[Chunk]]:
    """Finished chunks `window` at a time (a group that split in two may give one more than asked)."""
    for at in range(0, len(chunks), window):
        yield chunks[at : at + window]


def block_tokens_left(units: list[_Unit]) -> list[int]:
    """For each unit, the tokens from it to the end of its block: one backward pass, never a rescan."""
    left = [0] * len(units)
    run, block = 0, None
    for i in range(len(units) - 1, -1, -1):
        u = units[i]
        run = u.tokens + (run if u.block == block else 0)
        block = u.block
        left[i] = run
    return left


def finish_ids(chunks: list[Chunk], source_id: str, first: int = 0) -> list[Chunk]:
    """Number the chunks (from `first`) and give each a content hash and a deterministic uuid5 id."""
    for i, c in enumerate(chunks, start=first):
        c.index = i
        c.hash = hashlib.sha256(c.embed_text.encode()).hexdigest()[:16]
        c.id = str(uuid.uuid5(ID_NAMESPACE, f"{source_id}\x00{i}\x00{c.hash}"))
    return chunks
