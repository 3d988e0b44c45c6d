"""The ingest run: walk, skip unchanged, parse+chunk, enrich through the client API, write, then clean up."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from connectors.base import CollectionSpec, Maintenance
from connectors.chunks import ChunkBatch, ChunkFields
from connectors.filters import Cond
from connectors.registry import open_store
from engine.client.calls import ModelCalls
from engine.client.protocol import ShoalClient
from engine.errors import ShoalError
from pipeline.chunking import Chunk, Chunker
from pipeline.config import ConfigError, PipelineConfig, load_config
from pipeline.enrich import Enriched, Enricher, entity_tags
from pipeline.parsers import Block, Document, ParseError, parse_stream
from pipeline.roots import check_root, walk_root
from pipeline.shard import Shard
from pipeline.sources import SourceError, SourceFile, read_source
from pipeline.state import manifest_for
from pipeline.summary import FileIssue, IngestSummary, StageClock


class Progress(Protocol):
    """What the CLI's progress bar (or any caller) hears about a run."""

    def start(self, root: str, files: int) -> None: ...
    def file_done(self, rel: str, status: str, chunks: int, tokens: int) -> None: ...
    def phase(self, name: str) -> None: ...


class PartProgress(Protocol):
    """A progress that also hears of each written piece of a large file (`window_chunks` chunks at a time);
    `total` is an estimate (from how far into the file the piece ends) until the file's last piece."""

    def file_part(self, rel: str, chunks: int, tokens: int, done: int, total: int) -> None: ...


@dataclass
class _Done:
    """Enriched chunks of one file, ready to write: all of them, or one window of a large file."""

    file: SourceFile
    content_hash: str
    doc: Document
    chunks: list[Chunk]
    columns: Enriched
    ids: list[str] | None = None  # the file's last piece: every chunk id of the file (committed with it)
    total: int = 0  # chunks in the whole file


def open_client(cfg: PipelineConfig) -> ModelCalls:
    """The in-process async engine by default, or an AsyncClient for `engine.url`; both retry what the engine
    answers MODEL_LOADING / QUEUE_FULL / RESOURCE_EXHAUSTED under `engine.retry_*`."""
    if cfg.engine.url:
        from engine.client.http import AsyncClient

        return AsyncClient(cfg.engine.url, api_key=cfg.engine.api_key, retry=cfg.engine.retry())
    from engine.runtime import AsyncEngine

    return AsyncEngine(retry=cfg.engine.retry())


class IngestRun:
    """One ingest of one root into one collection; `await run()` returns the summary."""

    def __init__(
        self, root: Path, cfg: PipelineConfig, client: ShoalClient, progress: Progress | None,
        shard: Shard | None = None, rebuild_indexes: bool = False,
    ) -> None:  # fmt: skip
        self.root = check_root(root)  # a missing or unusable path fails here: no store or manifest is touched
        self.cfg = cfg
        self.enricher = Enricher(client, cfg)
        self.progress = progress
        self.s = IngestSummary(root=str(self.root), db=cfg.db, collection=cfg.collection)
        self.coll = cfg.collection
        self.clock = StageClock()
        self.failed: set[str] = set()  # paths failed in this run: a later piece of theirs is not committed
        self.written: dict[str, int] = {}  # chunks of a large file written so far (for its progress)
        self.shard = shard  # this run's share of the root's files (all of them when None)
        self.rebuild_indexes = rebuild_indexes

    async def prepare(self) -> None:
        """Everything that can fail on the config fails here, before a file is read; the models are checked
        before the store is opened, so a config that cannot run creates no store and no manifest."""
        infos = await self.enricher.validate()
        tok_model = self.cfg.chunking.tokenizer or self.cfg.dense.model
        try:
            tok = await self.enricher.client.tokenizer(tok_model)
        except Exception as e:  # noqa: BLE001 - any failure means chunking cannot count tokens
            raise ConfigError(f"chunking needs the tokenizer of {tok_model!r} on this machine: {e}") from e
        card_len = infos[self.cfg.dense.model].get("max_sequence_length")
        max_len = min(tok.max_len, card_len) if isinstance(card_len, int) and card_len else tok.max_len
        self.chunker = Chunker(tok.tokenizer, max_len, self.cfg.chunking)
        self.s.fingerprint = self.cfg.fingerprint(infos)
        self.store = open_store(self.cfg.db)
        try:
            self.manifest = manifest_for(self.store, self.cfg.state)
        except BaseException:
            self.store.close()
            raise
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
        try:
            await self.prepare()
            self.manifest.lock(self.shard)
        except BaseException:
            if hasattr(self, "manifest"):
                self.manifest.close()
            if hasattr(self, "store"):
                self.store.close()
            raise
        finished = False
        try:
            self.manifest.record_root(self.coll, str(self.root), self.cfg.model_dump(mode="json"), self.cfg.db)
            await self._run()
            finished = True
        finally:
            self.s.wall_s = time.time() - started
            busy = self.clock.busy
            self.s.parse_s, self.s.embed_s, self.s.write_s = (busy.get(k, 0.0) for k in ("parse", "embed", "write"))
            status = ("ok" if self.s.ok else "partial") if finished else "failed"  # an aborted run is never "ok"
            self.manifest.record_run(self.coll, str(self.root), started, status, self.s.model_dump())
            self.manifest.close()
            self.store.close()
        return self.s

    async def _run(self) -> None:
        w = await asyncio.to_thread(walk_root, self.root, self.cfg.source)
        present = {str(f.path) for f in w.files}  # every shard walks the whole root: deletes need all of it
        if self.shard is not None:
            w.files = [f for f in w.files if self.shard.owns(f.rel)]
            self.s.shard = str(self.shard)
        self.s.walk_complete = w.complete
        self.s.files_seen = len(w.files)
        self.s.files_refused = [FileIssue(path=p, reason=r) for p, r in w.skipped]
        self.s.walk_errors = [FileIssue(path=p, reason=r) for p, r in w.errors]
        if self.progress:
            self.progress.start(str(self.root), len(w.files))
        self.known = self.manifest.sources(self.coll, str(self.root))
        queue: asyncio.Queue[_Done | None] = asyncio.Queue(maxsize=2 * self.cfg.files_in_flight)
        self.queue = queue  # a large file's windows go to the writer as they are enriched
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
            await asyncio.to_thread(self._remove_deleted, present)
        changed = bool(self.s.chunks_written or self.s.chunks_deleted or self.s.orphans_removed)
        if self.progress:
            self.progress.phase("indexing")
        with self.clock.stage("write"):
            done = await asyncio.to_thread(self._finalize, changed)
        self.s.indexes = done.describe()

    def _finalize(self, changed: bool) -> Maintenance:
        with self.manifest.maintenance():  # shards of one store take turns
            return self.store.finalize(self.coll, changed, rebuild=self.rebuild_indexes)

    async def _process(self, f: SourceFile) -> _Done | None:
        """Read, skip when unchanged, parse and chunk, enrich; failures are recorded, never raised."""
        path, rec = str(f.path), self.known.get(str(f.path))
        with self.clock.stage("parse"):
            try:  # by its checked real path, no symlink followed, never blocking; over-size files are not read
                data = await asyncio.to_thread(read_source, f, self.cfg.source.max_file_mb)
            except SourceError as e:
                self._fail(f, None, str(e))
                return None
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
                doc = await asyncio.to_thread(parse_stream, data, f.path.name, self.cfg.source.invalid_utf8)
            except ParseError as e:
                self._fail(f, digest, str(e))
                return None
            except Exception as e:  # noqa: BLE001 - one bad document never stops the run
                self._fail(f, digest, f"parser error: {type(e).__name__}: {e}")
                return None
        del data  # a streamed text holds its decoded text only; the file's bytes can go
        self.s.warnings += [FileIssue(path=f.rel, reason=w) for w in doc.warnings]
        blocks: Iterable[Block] = doc.stream if doc.stream is not None else doc.blocks
        doc.blocks, doc.stream = [], None  # only the title, kind and pages are still needed
        windows = self.chunker.windows(blocks, path, self.cfg.window_chunks)  # parsed and chunked as it goes
        ids: list[str] = []
        part = await self._next_window(windows, f, digest)
        while part is not None:
            with self.clock.stage("embed"):
                try:
                    columns = await self.enricher.enrich(part)
                except ShoalError as e:  # the engine refused or failed this document's tasks
                    self._fail(f, digest, f"enrichment failed: {e.code}: {e.message}")
                    return None
            self.s.chunks_embedded += len(part)
            self.s.tokens_embedded += sum(c.n_tokens for c in part)
            ids += [c.id for c in part]
            nxt = await self._next_window(windows, f, digest)
            if path in self.failed:  # chunking failed on, or an earlier window's write failed
                return None
            if nxt is not None:
                total = max(len(ids) + 1, round(len(ids) * f.size / max(part[-1].end, 1)))  # an estimate
                await self.queue.put(_Done(f, digest, doc, part, columns, None, total))
                part = nxt
                continue
            self.s.pages += doc.pages
            return _Done(f, digest, doc, part, columns, ids, len(ids))
        return None  # a document always has a chunk (parse refuses one without text)

    async def _next_window(self, windows: Iterator[list[Chunk]], f: SourceFile, digest: str) -> list[Chunk] | None:
        """The next window of a document's chunks (parsed and chunked off the loop), None after the last;
        a failure fails the file."""
        with self.clock.stage("parse"):
            try:
                return await asyncio.to_thread(next, windows, None)
            except ParseError as e:
                self._fail(f, digest, str(e))
            except Exception as e:  # noqa: BLE001 - one bad document never stops the run
                self._fail(f, digest, f"parser error: {type(e).__name__}: {e}")
        return None

    def _fail(self, f: SourceFile, digest: str | None, reason: str) -> None:
        if str(f.path) in self.failed:  # one failure per file, however many of its windows were in the batch
            return None
        self.failed.add(str(f.path))
        self.manifest.fail(self.coll, str(self.root), str(f.path), f.rel, digest, reason)
        self.s.files_failed.append(FileIssue(path=f.rel, reason=reason))
        if self.progress:
            self.progress.file_done(f.rel, "failed", 0, 0)
        return None

    def _fields(self, d: _Done, i: int, now: float) -> ChunkFields:
        c, cols = d.chunks[i], d.columns
        fields: ChunkFields = {
            "id": c.id, "text": c.text, "root": str(self.root), "source": d.file.rel, "title": d.doc.title,
            "kind": d.doc.kind, "chunk_index": c.index, "chunk_hash": c.hash, "doc_hash": d.content_hash,
            "pages": c.pages, "heading_path": list(c.headings), "char_start": c.start, "char_end": c.end,
            "n_tokens": c.n_tokens, "ingested_at": now,
        }  # fmt: skip
        if cols.entities is not None:
            fields["entities"] = cols.entities[i]
            fields["entity_tags"] = entity_tags(cols.entities[i])
        if cols.classes is not None:
            fields["classes"] = cols.classes[i]
        return fields

    def _batch(self, d: _Done, now: float) -> ChunkBatch:
        """One file's (or window's) chunks as a write: their fields, and the vector arrays enrichment made."""
        fields = [self._fields(d, i, now) for i in range(len(d.chunks))]
        return ChunkBatch(fields, d.columns.vectors, d.columns.multivectors, d.columns.sparse)

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
        chunks = ChunkBatch.concat([self._batch(d, now) for d in batch])
        self.s.chunks_written += self.store.upsert(self.coll, chunks)
        del chunks
        done = [d for d in batch if d.ids is not None and str(d.file.path) not in self.failed]  # whole files
        stale: list[str] = []
        for d in done:
            rec = self.known.get(str(d.file.path))
            if rec is not None:
                new = set(d.ids or ())
                stale += [i for i in dict.fromkeys(rec.chunk_ids + rec.pending_ids) if i not in new]
        pending_now = self.manifest.sources_for(self.coll, [str(d.file.path) for d in done])
        for d in done:  # ids a crashed earlier attempt left pending are stale too
            new = set(d.ids or ())
            stale += [i for i in pending_now[str(d.file.path)].pending_ids if i not in new and i not in stale]
        self.s.chunks_deleted += self.store.delete(self.coll, stale)
        self.manifest.commit(
            self.coll,
            [
                {"path": str(d.file.path), "hash": d.content_hash, "fingerprint": self.s.fingerprint,
                 "ids": d.ids or [], "size": d.file.size}
                for d in done
            ],
        )  # fmt: skip
        self.s.files_processed += len(done)
        if self.progress:
            part = getattr(self.progress, "file_part", None)  # PartProgress: hears of a large file's windows
            for d in batch:
                tokens = sum(c.n_tokens for c in d.chunks)
                if d.ids is None and part is not None:
                    written = self.written.get(str(d.file.path), 0) + len(d.chunks)
                    self.written[str(d.file.path)] = written
                    part(d.file.rel, len(d.chunks), tokens, written, d.total)
                elif d in done:
                    self.written.pop(str(d.file.path), None)
                    self.progress.file_done(d.file.rel, "ok", len(d.chunks), tokens)

    def _remove_deleted(self, present: set[str]) -> None:
        """Chunks of files gone from the root, then any row of this root no manifest entry claims.

        A shard removes the gone files it owns. The store's ids are read before the manifest: an id another
        shard is writing is recorded pending before it lands, so it is claimed by the time it is read here."""
        root = str(self.root)
        records = self.manifest.sources(self.coll, root)
        owned = {p: r for p, r in records.items() if self.shard is None or self.shard.owns(r.rel)}
        gone = [r for p, r in owned.items() if p not in present]
        ids = [i for r in gone for i in dict.fromkeys(r.chunk_ids + r.pending_ids)]
        self.s.chunks_deleted += self.store.delete(self.coll, ids)
        self.manifest.remove(self.coll, [r.path for r in gone])
        self.s.files_deleted = len(gone)
        stored = self.store.ids_where(self.coll, Cond("root", "eq", root))
        claimed: set[str] = set()
        for p, r in self.manifest.sources(self.coll, root).items():
            if p in owned and p in present:
                claimed.update(r.chunk_ids)  # this run's own files: their pending ids are a failed write's
            elif p not in owned:
                claimed.update(r.chunk_ids + r.pending_ids)  # another shard's: may be writing them now
        self.s.orphans_removed += self.store.delete(self.coll, sorted(stored - claimed))


async def ingest_async(
    path: Path | str,
    config: PipelineConfig | None = None,
    *,
    client: ShoalClient | None = None,
    progress: Progress | None = None,
    shard: Shard | None = None,
    rebuild_indexes: bool = False,
) -> IngestSummary:
    """Ingest one folder or file; `client` is any shoal client (default: an in-process engine started here);
    `shard` takes one share of the files (see pipeline/shard.py); `rebuild_indexes` trains the store's indexes
    again over the whole collection instead of updating them."""
    cfg = config or PipelineConfig()
    check_root(Path(path))  # before a client (and its models) is started for nothing
    if client is not None:
        return await IngestRun(Path(path), cfg, client, progress, shard, rebuild_indexes).run()
    owned = open_client(cfg)
    try:
        return await IngestRun(Path(path), cfg, owned, progress, shard, rebuild_indexes).run()
    finally:
        await owned.close()


def ingest(
    path: Path | str,
    config: PipelineConfig | Path | str | None = None,
    *,
    db: str | None = None,
    client: ShoalClient | None = None,
    progress: Progress | None = None,
    shard: Shard | None = None,
    rebuild_indexes: bool = False,
) -> IngestSummary:
    """Blocking `ingest_async`: a folder into the store, incremental; returns the run summary."""
    cfg = config if isinstance(config, PipelineConfig) else load_config(config)
    if db:
        cfg = cfg.model_copy(update={"db": db})
    run = ingest_async(path, cfg, client=client, progress=progress, shard=shard, rebuild_indexes=rebuild_indexes)
    return asyncio.run(run)
