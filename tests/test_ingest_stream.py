"""A large file is enriched and written `window_chunks` chunks at a time: the same chunks as in one piece,
progress within the file, a failed window leaves no partial chunks, and a 5 MB text stays within 300 MB of
resident memory above the baseline (the pipeline's share: a child process with an instant stand-in engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.ingest_memory import CHILD  # the one measuring child script: the bench and this test read alike
from connectors.registry import open_store
from engine.errors import ModelLoadFailed
from pipeline import ingest
from pipeline.config import PipelineConfig
from tests.helpers import REPO

PARAGRAPH = "The pump number {n} stops when its impeller is blocked. Clear the impeller and restart it."


def big_text(folder: Path, paragraphs: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "big.txt").write_text("\n\n".join(PARAGRAPH.format(n=n) for n in range(paragraphs)))
    (folder / "small.md").write_text("# Small\n\nA short note.\n")
    return folder


def config(db: Path, window: int) -> PipelineConfig:
    return PipelineConfig(
        db=f"lancedb://{db}", window_chunks=window, chunking={"target_tokens": 16, "overlap_tokens": 0}
    )


class Recorder:
    def __init__(self) -> None:
        self.parts: list[tuple[str, int, int]] = []
        self.done: list[tuple[str, str, int]] = []

    def start(self, root: str, files: int) -> None: ...
    def phase(self, name: str) -> None: ...

    def file_done(self, rel: str, status: str, chunks: int, tokens: int) -> None:
        self.done.append((rel, status, chunks))

    def file_part(self, rel: str, chunks: int, tokens: int, done: int, total: int) -> None:
        self.parts.append((rel, done, total))


def stored(db: Path) -> dict[str, int]:
    """Chunks in the store per source."""
    store = open_store(f"lancedb://{db}")
    try:
        return {s.source: s.chunks for s in store.sources("chunks")}
    finally:
        store.close()


def test_a_large_file_is_written_a_window_at_a_time(tmp_path: Path, engine: Any) -> None:
    docs = big_text(tmp_path / "docs", 60)
    whole = ingest(docs, config(tmp_path / "whole", 10_000), client=engine)
    progress = Recorder()
    windowed = ingest(docs, config(tmp_path / "windowed", 7), client=engine, progress=progress)
    assert windowed.files_processed == whole.files_processed == 2 and not windowed.files_failed
    assert windowed.chunks_written == whole.chunks_written > 40
    assert stored(tmp_path / "windowed") == stored(tmp_path / "whole")
    total = whole.chunks_written - 1  # the small file is one chunk
    assert [p[1] for p in progress.parts] == list(range(7, total, 7))
    assert all(done < estimate and abs(estimate - total) <= 0.25 * total for _, done, estimate in progress.parts)
    assert ("big.txt", "ok", total - 7 * len(progress.parts)) in progress.done
    again = ingest(docs, config(tmp_path / "windowed", 7), client=engine)
    assert again.files_unchanged == 2 and again.chunks_written == 0


class FailsOnCall:
    """The shared engine's async surface, except that encode call number `n` fails (a window in the middle of a
    large file)."""

    def __init__(self, engine: Any, n: int) -> None:
        self.inner, self.n, self.calls = engine.aio, n, 0

    @property
    def aio(self) -> FailsOnCall:
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # models, tokenizer, ...: the engine's own

    async def encode(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.n:
            raise ModelLoadFailed("the engine failed this batch")
        return await self.inner.encode(*args, **kwargs)


def test_a_failed_window_leaves_no_partial_chunks(tmp_path: Path, engine: Any) -> None:
    docs = big_text(tmp_path / "docs", 60)
    (docs / "small.md").unlink()
    cfg = config(tmp_path / "db", 7)  # one encode call per window (a batch is 64 chunks)
    s = ingest(docs, cfg, client=FailsOnCall(engine, 4))  # windows 1-3 are written, window 4 fails
    assert [f.path for f in s.files_failed] == ["big.txt"] and "the engine failed" in s.files_failed[0].reason
    assert s.orphans_removed == 21  # the three windows written before the failure
    assert stored(tmp_path / "db").get("big.txt", 0) == 0


@pytest.mark.slow
def test_a_5_mb_text_stays_within_300_mb_above_the_baseline(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    words = [f"word{n % 997}" for n in range(900_000)]
    sentences = [" ".join(words[i : i + 12]) + "." for i in range(0, len(words), 12)]
    text = "\n\n".join(" ".join(sentences[i : i + 5]) for i in range(0, len(sentences), 5))
    (docs / "big.txt").write_text(text[:5_000_000])
    (tmp_path / "warm").mkdir()
    (tmp_path / "warm" / "a.txt").write_text("A short text to warm up the imports.\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    model = "sentence-transformers/all-MiniLM-L6-v2"
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(docs), str(tmp_path / "db"), model, str(tmp_path / "warm")],
        env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads(r.stdout.strip().splitlines()[-1])
    assert m["failed"] == [] and m["chunks"] > 1000, m
    above = (m["peak"] - m["base"]) / 2**20
    assert above <= 300, f"{above:.0f} MB above the baseline for a 5 MB text"


def test_a_streamed_text_is_read_a_group_of_blocks_at_a_time() -> None:
    from engine.model.tokenizer import tokenizer_for
    from pipeline.chunking import GROUP_BLOCKS, Chunker
    from pipeline.config import ChunkConfig
    from pipeline.parsers import parse, parse_stream

    data = "\n\n".join(PARAGRAPH.format(n=n) for n in range(5 * GROUP_BLOCKS)).encode()
    doc = parse_stream(data, "big.txt")
    assert doc.stream is not None and not doc.blocks  # nothing parsed yet but the first block
    taken = [0]

    def counted() -> Any:
        for b in doc.stream or ():
            taken[0] += 1
            yield b

    tok = tokenizer_for("sentence-transformers/all-MiniLM-L6-v2")
    chunker = Chunker(tok.tokenizer, tok.max_len, ChunkConfig(target_tokens=64, overlap_tokens=8))
    windows = chunker.windows(counted(), "big.txt", 100)
    first = next(windows)
    assert len(first) == 100 and taken[0] <= GROUP_BLOCKS  # one group read for the first window, not the file
    rest = [c for w in windows for c in w]
    whole = chunker.chunk(parse(data, "big.txt"), "big.txt")
    assert [(c.id, c.text) for c in first + rest] == [(c.id, c.text) for c in whole]  # the same chunks, ids
