"""What an ingest run reports: counts, failures with reasons, stage timings; also its exit code."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import BaseModel, Field


class FileIssue(BaseModel):
    path: str
    reason: str


class IngestSummary(BaseModel):
    """The result of `pipeline.ingest`: what was seen, skipped, processed, failed, written and removed."""

    root: str
    db: str
    collection: str
    fingerprint: str = ""
    shard: str | None = Field(default=None, description="I/N when this run took one shard of the files")
    walk_complete: bool = True
    files_seen: int = 0
    files_unchanged: int = 0
    files_processed: int = 0
    files_failed: list[FileIssue] = Field(default_factory=list)
    files_deleted: int = 0
    files_refused: list[FileIssue] = Field(default_factory=list, description="not followed or not read by the walk")
    walk_errors: list[FileIssue] = Field(default_factory=list)
    warnings: list[FileIssue] = Field(default_factory=list)
    pages: int = 0
    chunks_embedded: int = 0
    tokens_embedded: int = 0
    chunks_written: int = 0
    chunks_deleted: int = 0
    orphans_removed: int = 0
    parse_s: float = Field(default=0.0, description="seconds during which some document was being read/parsed")
    embed_s: float = Field(default=0.0, description="seconds during which some enrichment request was out")
    write_s: float = Field(default=0.0, description="seconds during which the store or manifest was written")
    wall_s: float = 0.0
    indexes: str = Field(default="", description="what the index maintenance did and which indexes answer now")

    @property
    def ok(self) -> bool:
        return not self.files_failed and self.walk_complete

    @property
    def exit_code(self) -> int:
        """0: all good; 3: some files failed or the walk was incomplete (everything else was ingested)."""
        return 0 if self.ok else 3


class StageClock:
    """Wall time during which a stage had at least one operation running (stages overlap in a run)."""

    def __init__(self) -> None:
        self.busy: dict[str, float] = {}
        self._active: dict[str, int] = {}
        self._since: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self._active.get(name, 0) == 0:
            self._since[name] = time.perf_counter()
        self._active[name] = self._active.get(name, 0) + 1
        try:
            yield
        finally:
            self._active[name] -= 1
            if self._active[name] == 0:
                self.busy[name] = self.busy.get(name, 0.0) + time.perf_counter() - self._since[name]
