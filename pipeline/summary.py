"""What an ingest run reports: counts, failures with reasons, stage timings; also its exit code."""

from __future__ import annotations

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
    parse_s: float = 0.0
    embed_s: float = 0.0
    write_s: float = 0.0
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.files_failed and self.walk_complete

    @property
    def exit_code(self) -> int:
        """0: all good; 3: some files failed or the walk was incomplete (everything else was ingested)."""
        return 0 if self.ok else 3
