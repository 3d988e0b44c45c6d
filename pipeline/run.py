"""The ingest run: walk, skip unchanged, parse+chunk, enrich through the client API, write, then clean up."""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from connectors.base import CollectionSpec, VectorStore, open_store, quote
from engine.errors import ShoalError
from pipeline.chunking import Chunk, Chunker
from pipeline.config import ConfigError, PipelineConfig, load_config
from pipeline.enrich import Enricher
from pipeline.manifest import Manifest
from pipeline.parsers import Document, ParseError, parse
from pipeline.sources import SourceFile, walk
from pipeline.summary import FileIssue, IngestSummary, StageClock


class Progress(Protocol):
    """What the CLI's progress bar (or any caller) hears about a run."""

    def start(self, root: str, files: int) -> None: ...
    def file_done(self, rel: str, status: str, chunks: int, tokens: int) -> None: ...
    def phase(self, name: str) -> None: ...


@dataclass
class _Done:
    file: SourceFile
    content_hash: str
    doc: Document
    chunks: list[Chunk]
    columns: list[dict[str, Any]] = field(default_factory=list)


def manifest_for(store: VectorStore, cfg: PipelineConfig) -> Manifest:
    state = store.state_dir() or Path("./shoal-data").resolve()
    return Manifest(state / "manifest.sqlite")


def open_client(cfg: PipelineConfig) -> Any:
    """The in-process async engine by default, or an AsyncClient for `engine.url`."""
    if cfg.engine.url:
        from engine.client.http import AsyncClient

        return AsyncClient(cfg.engine.url, api_key=cfg.engine.api_key)
    from engine.runtime import AsyncEngine

    return AsyncEngine()


class IngestRun:
    """One ingest of one root into one collection; `await run()` returns the summary."""

    def __init__(self, root: Path, cfg: PipelineConfig, client: Any, progress: Progress | None) -> None:
        self.root = root.expanduser().resolve()
        self.cfg = cfg
        self.store = open_store(cfg.db)
        self.manifest = manifest_for(self.store, cfg)
        self.enricher = Enricher(client, cfg)
        self.progress = progress
        self.s = IngestSummary(root=str(self.root), db=cfg.db, collection=cfg.collection)
        self.coll = cfg.collection
        self.clock = StageClock()

    async def prepare(self) -> None:
        """Everything that can fail on the config fails here, before a file is read."""
        from engine.model.tokenizer import tokenizer_for

        infos = await self.enricher.validate()
        tok_model = self.cfg.chunking.tokenizer or self.cfg.dense.model
        try:
            tok = await asyncio.to_thread(tokenizer_for, tok_model)
        except Exception as e:  # noqa: BLE001 - any failure means chunking cannot count tokens
            raise ConfigError(f"chunking needs the tokenizer of {tok_model!r} on this machine: {e}") from e
        max_len = min(tok.max_len, infos[self.cfg.dense.model].get("max_sequence_length") or tok.max_len)
        self.chunker = Chunker(tok.tokenizer, max_len, self.cfg.chunking)
        self.s.fingerprint = self.cfg.fingerprint(infos)
        spec = CollectionSpec(
            name=self.coll,
            dense_dim=self.enricher.dense_dim(),
            multivector_dim=self.enricher.multivector_dim(),
            sparse=self.cfg.step("sparse") is not None,
            entities=self.cfg.step("entities") is not None,
            classes=self.cfg.step("classify") is not None,
        )
        self.store.ensure_collection(spec)

    async def run(self) -> IngestSummary:
        started = time.time()
        await self.prepare()
        self.manifest.lock()
        try:
            self.manifest.record_root(self.coll, str(self.root), self.cfg.model_dump(mode="json"), self.cfg.db)
            await self._run()
        finally:
            self.s.wall_s = time.time() - started
            busy = self.clock.busy
            self.s.parse_s, self.s.embed_s, self.s.write_s = (busy.get(k, 0.0) for k in ("parse", "embed", "write"))
            self.manifest.record_run(
                self.coll, str(self.root), started, "ok" if self.s.ok else "partial", self.s.model_dump()
            )
            self.manifest.close()
        return self.s

    async def _run(self) -> None:
        w = await asyncio.to_thread(walk, self.root, self.cfg.source)
        self.s.walk_complete = w.complete
        self.s.files_seen = len(w.files)
        self.s.files_refused = [FileIssue(path=p, reason=r) for p, r in w.skipped]
        self.s.walk_errors = [FileIssue(path=p, reason=r) for p, r in w.errors]
        if self.progress:
            self.progress.start(str(self.root), len(w.files))
        self.known = self.manifest.sources(self.coll, str(self.root))
        queue: asyncio.Queue[_Done | None] = asyncio.Queue(maxsize=2 * self.cfg.files_in_flight)
        writer = asyncio.create_task(self._writer(queue))
        slots = asyncio.Semaphore(self.cfg.files_in_flight)

        async def one(f: SourceFile) -> None:
            try:
                done = await self._process(f)
            finally:
                slots.release()
            if done is not None:
                await queue.put(done)

        tasks: list[asyncio.Task[None]] = []
        try:
            for f in w.files:  # at most files_in_flight documents are read, parsed and enriched at once
                await slots.acquire()
                tasks.append(asyncio.create_task(one(f)))
            await asyncio.gather(*tasks)
        finally:
            await queue.put(None)
            await writer
        if self.progress:
            self.progress.phase("cleanup")
        if w.complete:  # a partial walk deletes nothing
            await asyncio.to_thread(self._remove_deleted, {str(f.path) for f in w.files})
        changed = bool(self.s.chunks_written or self.s.chunks_deleted or self.s.orphans_removed)
        if self.progress:
            self.progress.phase("indexing")
        with self.clock.stage("write"):
            await asyncio.to_thread(self.store.finalize, self.coll, changed)

    async def _process(self, f: SourceFile) -> _Done | None:
        """Read, skip when unchanged, parse and chunk, enrich; failures are recorded, never raised."""
        path, rec = str(f.path), self.known.get(str(f.path))
        limit = self.cfg.source.max_file_mb * 1024 * 1024
        if f.size > limit:
            return self._fail(
                f, None, f"file too large: {f.size / 2**20:.1f} MiB, over the {self.cfg.source.max_file_mb:g} MiB limit"
            )
        with self.clock.stage("parse"):
            try:
                data = await asyncio.to_thread(f.path.read_bytes)
            except OSError as e:
                return self._fail(f, None, f"cannot read: {e.strerror or e}")
            digest = hashlib.sha256(data).hexdigest()
            if (
                rec is not None
                and rec.status == "ok"
                and rec.content_hash == digest
                and rec.fingerprint == self.s.fingerprint
                and not rec.pending_ids
            ):
                self.s.files_unchanged += 1
                if self.progress:
                    self.progress.file_done(f.rel, "unchanged", 0, 0)
                return None
            try:
                doc, chunks = await asyncio.to_thread(self._parse_chunk, data, f, path)
            except ParseError as e:
                return self._fail(f, digest, str(e))
            except Exception as e:  # noqa: BLE001 - one bad document never stops the run
                return self._fail(f, digest, f"parser error: {type(e).__name__}: {e}")
        self.s.warnings += [FileIssue(path=f.rel, reason=w) for w in doc.warnings]
        with self.clock.stage("embed"):
            try:
                columns = await self.enricher.enrich(chunks)
            except ShoalError as e:  # the engine refused or failed this document's tasks
                return self._fail(f, digest, f"enrichment failed: {e.code}: {e.message}")
        self.s.chunks_embedded += len(chunks)
        self.s.tokens_embedded += sum(c.n_tokens for c in chunks)
        self.s.pages += doc.pages
        return _Done(f, digest, doc, chunks, columns)

    def _parse_chunk(self, data: bytes, f: SourceFile, path: str) -> tuple[Document, list[Chunk]]:
        doc = parse(data, f.path.name, self.cfg.source.invalid_utf8)
        return doc, self.chunker.chunk(doc, path)

    def _fail(self, f: SourceFile, digest: str | None, reason: str) -> None:
        self.manifest.fail(self.coll, str(self.root), str(f.path), f.rel, digest, reason)
        self.s.files_failed.append(FileIssue(path=f.rel, reason=reason))
        if self.progress:
            self.progress.file_done(f.rel, "failed", 0, 0)
        return None

    def _row(self, d: _Done, c: Chunk, cols: dict[str, Any], now: float) -> dict[str, Any]:
        return {
            "id": c.id, "text": c.text, "root": str(self.root), "source": d.file.rel, "title": d.doc.title,
            "kind": d.doc.kind, "chunk_index": c.index, "chunk_hash": c.hash, "doc_hash": d.content_hash,
            "pages": c.pages, "heading_path": list(c.headings), "char_start": c.start, "char_end": c.end,
            "n_tokens": c.n_tokens, "ingested_at": now, **cols,
        }  # fmt: skip

    async def _writer(self, queue: asyncio.Queue[_Done | None]) -> None:
        """Batches finished files into store writes (by size or age): pending ids, upsert, drop stale, commit."""
        batch: list[_Done] = []
        first_at, finished = 0.0, False
        while not finished:
            wait = None if not batch else max(0.0, first_at + self.cfg.write_interval_s - time.monotonic())
            aged = False
            try:
                item = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                item, aged = None, True
            if item is None and not aged:
                finished = True
            elif item is not None:
                first_at = first_at if batch else time.monotonic()
                batch.append(item)
            rows = sum(len(d.chunks) for d in batch)
            if batch and (finished or aged or rows >= self.cfg.write_batch_rows):
                with self.clock.stage("write"):
                    try:
                        await asyncio.to_thread(self._write, batch)
                    except Exception as e:  # noqa: BLE001 - a failed write fails its files, not the run
                        for d in batch:
                            self._fail(d.file, None, f"store write failed: {type(e).__name__}: {e}")
                batch = []

    def _write(self, batch: list[_Done]) -> None:
        root = str(self.root)
        self.manifest.add_pending(
            self.coll, root, [(str(d.file.path), d.file.rel, [c.id for c in d.chunks]) for d in batch]
        )
        now = time.time()
        rows = [self._row(d, c, cols, now) for d in batch for c, cols in zip(d.chunks, d.columns, strict=True)]
        self.s.chunks_written += self.store.upsert(self.coll, rows)
        stale: list[str] = []
        for d in batch:
            rec = self.known.get(str(d.file.path))
            if rec is not None:
                new = {c.id for c in d.chunks}
                stale += [i for i in dict.fromkeys(rec.chunk_ids + rec.pending_ids) if i not in new]
        pending_now = self.manifest.sources(self.coll, root)
        for d in batch:  # ids a crashed earlier attempt left pending are stale too
            new = {c.id for c in d.chunks}
            stale += [i for i in pending_now[str(d.file.path)].pending_ids if i not in new and i not in stale]
        self.s.chunks_deleted += self.store.delete(self.coll, stale)
        self.manifest.commit(
            self.coll,
            [
                {"path": str(d.file.path), "hash": d.content_hash, "fingerprint": self.s.fingerprint,
                 "ids": [c.id for c in d.chunks], "size": d.file.size}
                for d in batch
            ],
        )  # fmt: skip
        self.s.files_processed += len(batch)
        if self.progress:
            for d in batch:
                self.progress.file_done(d.file.rel, "ok", len(d.chunks), sum(c.n_tokens for c in d.chunks))

    def _remove_deleted(self, present: set[str]) -> None:
        """Chunks of files gone from the root, then any row of this root no manifest entry claims."""
        root = str(self.root)
        records = self.manifest.sources(self.coll, root)
        gone = [r for p, r in records.items() if p not in present]
        ids = [i for r in gone for i in dict.fromkeys(r.chunk_ids + r.pending_ids)]
        self.s.chunks_deleted += self.store.delete(self.coll, ids)
        self.manifest.remove(self.coll, [r.path for r in gone])
        self.s.files_deleted = len(gone)
        claimed = {i for p, r in records.items() if p in present for i in r.chunk_ids}
        orphans = self.store.ids_where(self.coll, f"root = {quote(root)}") - claimed
        self.s.orphans_removed += self.store.delete(self.coll, sorted(orphans))


async def ingest_async(
    path: Path | str, config: PipelineConfig | None = None, *, client: Any = None, progress: Progress | None = None
) -> IngestSummary:
    """Ingest one folder; `client` is any shoal client (default: an in-process engine started here)."""
    cfg = config or PipelineConfig()
    owned = client is None
    client = client if client is not None else open_client(cfg)
    try:
        return await IngestRun(Path(path), cfg, client, progress).run()
    finally:
        if owned:
            await client.close()


def ingest(
    path: Path | str,
    config: PipelineConfig | Path | str | None = None,
    *,
    db: str | None = None,
    client: Any = None,
    progress: Progress | None = None,
) -> IngestSummary:
    """Blocking `ingest_async`: a folder into the store, incremental; returns the run summary."""
    cfg = config if isinstance(config, PipelineConfig) else load_config(config)
    if db:
        cfg = cfg.model_copy(update={"db": db})
    return asyncio.run(ingest_async(path, cfg, client=client, progress=progress))
