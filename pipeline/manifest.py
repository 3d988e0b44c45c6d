"""The ingest manifest in SQLite (a local folder): per source its hash, fingerprint, chunk ids, status.

Embedded stores keep it in their own folder; `pipeline/manifest_store.py` keeps the same records inside a
server store for jobs without a volume.
"""

from __future__ import annotations

import fcntl
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypedDict

from pydantic import JsonValue

from pipeline.shard import Shard

SCHEMA = """
CREATE TABLE IF NOT EXISTS sources (
    collection TEXT NOT NULL, path TEXT NOT NULL, root TEXT NOT NULL, rel TEXT NOT NULL,
    content_hash TEXT, fingerprint TEXT, chunk_ids TEXT NOT NULL DEFAULT '[]',
    pending_ids TEXT NOT NULL DEFAULT '[]', status TEXT NOT NULL, error TEXT,
    size INTEGER, chunks INTEGER NOT NULL DEFAULT 0, updated_at REAL,
    PRIMARY KEY (collection, path));
CREATE INDEX IF NOT EXISTS sources_root ON sources (collection, root);
CREATE TABLE IF NOT EXISTS roots (
    collection TEXT NOT NULL, root TEXT NOT NULL, config TEXT NOT NULL, db TEXT NOT NULL,
    last_run REAL, PRIMARY KEY (collection, root));
CREATE TABLE IF NOT EXISTS collections (collection TEXT PRIMARY KEY, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, collection TEXT, root TEXT, started REAL, finished REAL,
    status TEXT, summary TEXT);
"""


Config = dict[str, JsonValue]  # a run's pipeline config or summary as JSON (PipelineConfig.model_dump)
SQLValue = str | int | float | bytes | None  # what a statement binds


def _unheld(path: Path) -> bool:
    """No process holds a lock on this file (checked by taking and dropping an exclusive one)."""
    probe: list[IO[str]] = []
    free = _flock(probe, path, exclusive=True)
    for f in probe:
        f.close()
    return free


def _flock(held: list[IO[str]], path: Path, exclusive: bool) -> bool:
    """Take a lock on a file without waiting; appended to `held` when taken."""
    f = open(path, "w")  # noqa: SIM115 - held for the run
    try:
        fcntl.flock(f, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return False
    held.append(f)
    return True


class CommitItem(TypedDict):
    """A source whose chunks were all written: its new hash, fingerprint, chunk ids and size."""

    path: str
    hash: str
    fingerprint: str | None
    ids: list[str]
    size: int


class SourceRow(TypedDict):
    """One recorded source, as `shoal sources` lists it."""

    path: str
    root: str
    rel: str
    status: str
    error: str | None
    chunks: int
    updated_at: float | None


class RunRow(TypedDict):
    """The last run of one root."""

    root: str
    started: float | None
    finished: float | None
    status: str | None


@dataclass
class SourceRecord:
    """What the manifest knows about one file."""

    path: str
    rel: str
    content_hash: str | None
    fingerprint: str | None
    chunk_ids: list[str]
    pending_ids: list[str]
    status: str  # ok | failed
    error: str | None


class StoreLocked(Exception):
    code = "STORE_LOCKED"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code


class Manifest:
    """One SQLite file; every method is a short transaction, safe to call from worker threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self._mu = threading.Lock()
        self._lock_files: list[IO[str]] = []

    def close(self) -> None:
        self.unlock()
        self.db.close()

    # -- run lock: one ingest per store, or one per shard, at a time (released by the OS if the process dies) --

    def lock(self, shard: Shard | None = None) -> None:
        """Hold the store for this run: alone, or (with a shard) beside the other shards of the same count.

        `manifest.lock` is held exclusively by an unsharded run and shared by sharded ones; a sharded run also
        holds its count's file shared and its own shard's file exclusively, and refuses to start while a run
        of another count holds its count's file (the two splits would overlap)."""
        held: list[IO[str]] = []
        try:
            if not _flock(held, self.path.with_suffix(".lock"), exclusive=shard is None):
                what = "another ingest is writing to this store" if shard is None else "an ingest of every shard is writing"  # fmt: skip
                raise StoreLocked(f"{what} ({self.path.parent})")
            if shard is not None:
                self._lock_shard(held, shard)
        except BaseException:
            for f in held:
                f.close()
            raise
        self._lock_files = held

    def _lock_shard(self, held: list[IO[str]], shard: Shard) -> None:
        stem = self.path.with_suffix("")
        mine = Path(f"{stem}.shards-{shard.count}.lock")
        if not _flock(held, mine, exclusive=False):
            raise StoreLocked(f"shards of {shard.count} are being re-balanced ({self.path.parent})")
        for other in sorted(stem.parent.glob(f"{stem.name}.shards-*.lock")):
            if other != mine and not _unheld(other):
                raise StoreLocked(
                    f"shards of {other.name.split('-')[-1].split('.')[0]} are still writing to {self.path.parent}; "
                    f"finish that run (or use its count) before running shards of {shard.count}",
                    code="SHARD_COUNT_CHANGED",
                )
        own = Path(f"{stem}.shard-{shard.index}-of-{shard.count}.lock")
        if not _flock(held, own, exclusive=True):
            raise StoreLocked(f"shard {shard} is already being written by another ingest ({self.path.parent})")

    def unlock(self) -> None:
        for f in reversed(self._lock_files):
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()
        self._lock_files = []

    @contextmanager
    def maintenance(self) -> Iterator[None]:
        """One index maintenance at a time across the shards of a store (waits for the one running)."""
        with open(self.path.with_suffix(".maintenance.lock"), "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _tx(self, statements: list[tuple[str, tuple[SQLValue, ...]]]) -> None:
        with self._mu:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self.db.execute(sql, args)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def _rows(self, sql: str, args: tuple[SQLValue, ...] = ()) -> list[tuple[Any, ...]]:  # sqlite3 rows are untyped
        with self._mu:
            return self.db.execute(sql, args).fetchall()

    # -- sources ------------------------------------------------------------------------------------

    def sources(self, collection: str, root: str | None = None) -> dict[str, SourceRecord]:
        sql = "SELECT path, rel, content_hash, fingerprint, chunk_ids, pending_ids, status, error FROM sources"
        sql += " WHERE collection = ?" + (" AND root = ?" if root else "")
        rows = self._rows(sql, (collection, root) if root else (collection,))
        return {
            r[0]: SourceRecord(r[0], r[1], r[2], r[3], json.loads(r[4]), json.loads(r[5]), r[6], r[7]) for r in rows
        }

    def sources_for(self, collection: str, paths: list[str]) -> dict[str, SourceRecord]:
        """The records of some sources (by absolute path); missing ones are left out."""
        out: dict[str, SourceRecord] = {}
        sql = "SELECT path, rel, content_hash, fingerprint, chunk_ids, pending_ids, status, error FROM sources"
        for i in range(0, len(paths), 500):
            part = paths[i : i + 500]
            rows = self._rows(
                sql + f" WHERE collection = ? AND path IN ({', '.join('?' * len(part))})", (collection, *part)
            )
            out.update(
                {
                    r[0]: SourceRecord(r[0], r[1], r[2], r[3], json.loads(r[4]), json.loads(r[5]), r[6], r[7])
                    for r in rows
                }
            )
        return out

    def add_pending(self, collection: str, root: str, items: list[tuple[str, str, list[str]]]) -> None:
        """Before a write: remember the ids about to land, so a crash leaves no orphan behind."""
        stmts: list[tuple[str, tuple[SQLValue, ...]]] = []
        for path, rel, ids in items:
            stmts.append(
                (
                    "INSERT INTO sources (collection, path, root, rel, status, pending_ids, updated_at) "
                    "VALUES (?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (collection, path) DO UPDATE SET "
                    "pending_ids = json((SELECT json_group_array(DISTINCT value) FROM "
                    "(SELECT value FROM json_each(sources.pending_ids) UNION SELECT value FROM json_each(?))))",
                    (collection, path, root, rel, json.dumps(ids), time.time(), json.dumps(ids)),
                )
            )
        self._tx(stmts)

    def commit(self, collection: str, items: list[CommitItem]) -> None:
        """After a write and the removal of stale chunks: the source's new state, pending cleared."""
        self._tx(
            [
                (
                    "UPDATE sources SET content_hash = ?, fingerprint = ?, chunk_ids = ?, pending_ids = '[]', "
                    "status = 'ok', error = NULL, size = ?, chunks = ?, updated_at = ? WHERE collection = ? AND path = ?",
                    (
                        it["hash"],
                        it["fingerprint"],
                        json.dumps(it["ids"]),
                        it["size"],
                        len(it["ids"]),
                        time.time(),
                        collection,
                        it["path"],
                    ),
                )  # fmt: skip
                for it in items
            ]
        )

    def fail(self, collection: str, root: str, path: str, rel: str, content_hash: str | None, reason: str) -> None:
        """A file that could not be ingested: its reason is kept; its last good chunks (if any) stay."""
        self._tx(
            [
                (
                    "INSERT INTO sources (collection, path, root, rel, content_hash, status, error, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, 'failed', ?, ?) ON CONFLICT (collection, path) DO UPDATE SET "
                    "status = 'failed', error = excluded.error, updated_at = excluded.updated_at",
                    (collection, path, root, rel, content_hash, reason, time.time()),
                )
            ]
        )

    def remove(self, collection: str, paths: list[str]) -> None:
        self._tx([("DELETE FROM sources WHERE collection = ? AND path = ?", (collection, p)) for p in paths])

    # -- roots, collections, runs -------------------------------------------------------------------

    def record_root(self, collection: str, root: str, config: Config, db: str) -> None:
        self._tx(
            [
                (
                    "INSERT INTO roots (collection, root, config, db, last_run) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (collection, root) DO UPDATE SET config = excluded.config, db = excluded.db, "
                    "last_run = excluded.last_run",
                    (collection, root, json.dumps(config), db, time.time()),
                ),
                (
                    "INSERT INTO collections (collection, config) VALUES (?, ?) "
                    "ON CONFLICT (collection) DO UPDATE SET config = excluded.config",
                    (collection, json.dumps(config)),
                ),
            ]
        )

    def roots(self, collection: str | None = None) -> list[tuple[str, str, Config]]:
        """(collection, root, config) of every recorded root."""
        sql = "SELECT collection, root, config FROM roots" + (" WHERE collection = ?" if collection else "")
        return [(c, r, json.loads(cfg)) for c, r, cfg in self._rows(sql, (collection,) if collection else ())]

    def collection_config(self, collection: str) -> Config | None:
        rows = self._rows("SELECT config FROM collections WHERE collection = ?", (collection,))
        return json.loads(rows[0][0]) if rows else None

    def record_run(self, collection: str, root: str, started: float, status: str, summary: Config) -> None:
        self._tx(
            [
                (
                    "INSERT INTO runs (collection, root, started, finished, status, summary) VALUES (?, ?, ?, ?, ?, ?)",
                    (collection, root, started, time.time(), status, json.dumps(summary, default=str)),
                )
            ]
        )

    # -- listings and removal (shoal collections / sources / forget / delete) ----------------------

    def source_rows(self, collection: str) -> list[SourceRow]:
        """Every recorded source of a collection: path, root, rel, status, error, chunks, updated_at."""
        sql = "SELECT path, root, rel, status, error, chunks, updated_at FROM sources WHERE collection = ?"
        return [
            SourceRow(path=p, root=r, rel=rel, status=st, error=err, chunks=n, updated_at=at)
            for p, r, rel, st, err, n, at in self._rows(sql + " ORDER BY root, rel", (collection,))
        ]

    def last_runs(self, collection: str) -> list[RunRow]:
        """The last run of each root of a collection: root, started, finished, status."""
        sql = (
            "SELECT root, started, finished, status FROM runs WHERE id IN "
            "(SELECT max(id) FROM runs WHERE collection = ? GROUP BY root) ORDER BY root"
        )
        return [RunRow(root=r, started=s, finished=f, status=st) for r, s, f, st in self._rows(sql, (collection,))]

    def forget_root(self, collection: str, root: str) -> None:
        """Stop tracking a root: its record, its sources' records and its runs."""
        self._tx(
            [
                (f"DELETE FROM {t} WHERE collection = ? AND root = ?", (collection, root))
                for t in ("roots", "sources", "runs")
            ]
        )

    def drop(self, collection: str) -> None:
        """Every record of a collection."""
        tables = ("roots", "sources", "runs", "collections")
        self._tx([(f"DELETE FROM {t} WHERE collection = ?", (collection,)) for t in tables])
