"""The ingest manifest kept inside the vector store itself (a side collection), for jobs with no volume.

Same records and methods as the SQLite `Manifest`, stored as JSON documents in the store's state table
(`shoal_state`): one per source, root, collection and run. One ingest at a time holds a lease record that
it renews while it runs; a crashed run's lease expires after `LEASE_S`, then the next run takes over.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from connectors.base import JSONValue, Record, StateTable
from pipeline.manifest import CommitItem, Config, RunRow, SourceRecord, SourceRow, StoreLocked
from pipeline.shard import Shard

LEASE_S = 30.0
KEEP_RUNS = 20
LOCK_KEY = "lock"


def _key(kind: str, collection: str, name: str = "") -> str:
    return f"{kind}:{collection}:{name}"


def _record(d: Record) -> SourceRecord:
    return SourceRecord(
        _text(d, "path") or "", _text(d, "rel") or "", _text(d, "content_hash"), _text(d, "fingerprint"),
        _texts(d, "chunk_ids"), _texts(d, "pending_ids"), _text(d, "status") or "", _text(d, "error"),
    )  # fmt: skip


def _text(d: Record, key: str) -> str | None:
    value = d.get(key)
    return value if isinstance(value, str) else None


def _texts(d: Record, key: str) -> list[str]:
    value = d.get(key)
    return [str(v) for v in value] if isinstance(value, list) else []


def _number(d: Record, key: str) -> float | None:
    value = d.get(key)
    return float(value) if isinstance(value, int | float) else None


def _config(d: Record | None) -> Config | None:
    value = d.get("config") if d else None
    return value if isinstance(value, dict) else None


class StoreManifest:
    """The manifest as documents in a store's state table; safe to call from worker threads."""

    def __init__(self, table: StateTable, where: str, lease_s: float = LEASE_S) -> None:
        self.table = table
        self.where = where
        self.lease_s = lease_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._mu = threading.RLock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._key: str = LOCK_KEY
        self._shards: int | None = None

    # -- lease: one ingest per store at a time ------------------------------------------------------

    def lock(self, shard: Shard | None = None) -> None:
        """Take the lease: the store's (`lock`) for an unsharded run, or its shard's (`lock:N:I`), refused while
        an unexpired lease of another run conflicts (the same key, any key against an unsharded run, or shards
        of another count)."""
        key = LOCK_KEY if shard is None else f"{LOCK_KEY}:{shard.count}:{shard.index}"
        with self._mu:
            now = time.time()
            for other, held in self.table.scan("lock").items():
                if held.get("owner") == self.owner or (_number(held, "expires") or 0.0) <= now:
                    continue
                count = _number(held, "shards")
                if other == key or shard is None or count is None:
                    raise StoreLocked(
                        f"another ingest ({held.get('owner')}) is writing to {self.where}; its lease expires in "
                        f"{(_number(held, 'expires') or now) - now:.0f} s if it has stopped"
                    )
                if int(count) != shard.count:
                    raise StoreLocked(
                        f"shards of {int(count)} are still writing to {self.where}; finish that run (or use its "
                        f"count) before running shards of {shard.count}",
                        code="SHARD_COUNT_CHANGED",
                    )
            self._key, self._shards = key, shard.count if shard is not None else None
            self._renew()
            if self.table.get([key])[key]["owner"] != self.owner:  # lost a race to another job
                raise StoreLocked(f"another ingest took the lease of {self.where} at the same moment")
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name="shoal-manifest-lease", daemon=True)
        self._beat.start()

    def _renew(self) -> None:
        doc: Record = {"kind": "lock", "owner": self.owner, "expires": time.time() + self.lease_s, "shards": self._shards}  # fmt: skip
        self.table.put({self._key: doc})

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            with self._mu:
                self._renew()

    def unlock(self) -> None:
        if self._beat is None:
            return
        self._stop.set()
        self._beat.join()
        self._beat = None
        with self._mu:
            held = self.table.get([self._key]).get(self._key)
            if held and held["owner"] == self.owner:
                self.table.delete([self._key])

    def close(self) -> None:
        self.unlock()

    @contextmanager
    def maintenance(self) -> Iterator[None]:
        """Index maintenance beside other shards: server stores index as they go, so nothing to order."""
        yield

    # -- sources ------------------------------------------------------------------------------------

    def sources(self, collection: str, root: str | None = None) -> dict[str, SourceRecord]:
        with self._mu:
            docs = self.table.scan("source", collection, root)
        return {r.path: r for r in map(_record, docs.values())}

    def sources_for(self, collection: str, paths: list[str]) -> dict[str, SourceRecord]:
        with self._mu:
            docs = self.table.get([_key("source", collection, p) for p in paths])
        return {r.path: r for r in map(_record, docs.values())}

    def add_pending(self, collection: str, root: str, items: list[tuple[str, str, list[str]]]) -> None:
        """Before a write: remember the ids about to land, so a crash leaves no orphan behind."""
        with self._mu:
            keys = [_key("source", collection, path) for path, _, _ in items]
            have = self.table.get(keys)
            now = time.time()
            out: dict[str, Record] = {}
            for key, (path, rel, ids) in zip(keys, items, strict=True):
                doc: Record = have.get(key) or {
                    "kind": "source", "collection": collection, "root": root, "path": path, "rel": rel,
                    "status": "pending", "chunk_ids": [], "pending_ids": [], "updated_at": now,
                }  # fmt: skip
                pending: list[JSONValue] = list(dict.fromkeys([*_texts(doc, "pending_ids"), *ids]))
                doc["pending_ids"] = pending
                out[key] = doc
            self.table.put(out)

    def commit(self, collection: str, items: list[CommitItem]) -> None:
        """After a write and the removal of stale chunks: the source's new state, pending cleared."""
        with self._mu:
            keys = [_key("source", collection, it["path"]) for it in items]
            have = self.table.get(keys)
            out: dict[str, Record] = {}
            for key, it in zip(keys, items, strict=True):
                if key in have:
                    doc = have[key]
                    chunk_ids: list[JSONValue] = list(it["ids"])
                    doc.update(
                        content_hash=it["hash"], fingerprint=it["fingerprint"], chunk_ids=chunk_ids,
                        pending_ids=[], status="ok", error=None, size=it["size"], chunks=len(it["ids"]),
                        updated_at=time.time(),
                    )  # fmt: skip
                    out[key] = doc
            self.table.put(out)

    def fail(self, collection: str, root: str, path: str, rel: str, content_hash: str | None, reason: str) -> None:
        """A file that could not be ingested: its reason is kept; its last good chunks (if any) stay."""
        with self._mu:
            key = _key("source", collection, path)
            doc: Record = self.table.get([key]).get(key) or {
                "kind": "source", "collection": collection, "root": root, "path": path, "rel": rel,
                "content_hash": content_hash, "chunk_ids": [], "pending_ids": [],
            }  # fmt: skip
            doc.update(status="failed", error=reason, updated_at=time.time())
            self.table.put({key: doc})

    def remove(self, collection: str, paths: list[str]) -> None:
        with self._mu:
            self.table.delete([_key("source", collection, p) for p in paths])

    # -- roots, collections, runs -------------------------------------------------------------------

    def record_root(self, collection: str, root: str, config: Config, db: str) -> None:
        now = time.time()
        with self._mu:
            self.table.put(
                {
                    _key("root", collection, root): {
                        "kind": "root", "collection": collection, "root": root, "config": config, "db": db,
                        "last_run": now,
                    },
                    _key("collection", collection): {"kind": "collection", "collection": collection, "config": config},
                }
            )  # fmt: skip

    def roots(self, collection: str | None = None) -> list[tuple[str, str, Config]]:
        """(collection, root, config) of every recorded root."""
        with self._mu:
            docs = self.table.scan("root", collection)
        found = [(_text(d, "collection") or "", _text(d, "root") or "", _config(d) or {}) for d in docs.values()]
        return sorted(found, key=lambda r: (r[0], r[1]))

    def collection_config(self, collection: str) -> Config | None:
        key = _key("collection", collection)
        with self._mu:
            doc = self.table.get([key]).get(key)
        return _config(doc)

    def record_run(self, collection: str, root: str, started: float, status: str, summary: Config) -> None:
        """Keep the last KEEP_RUNS runs of a collection (the state table does not grow per run)."""
        doc: Record = {"kind": "run", "collection": collection, "root": root, "started": started, "finished": time.time(),
               "status": status, "summary": summary}  # fmt: skip
        with self._mu:
            self.table.put({_key("run", collection, f"{started:.6f}:{self.owner}"): doc})
            runs = self.table.scan("run", collection)
            old = sorted(runs, key=lambda k: _number(runs[k], "started") or 0.0)[:-KEEP_RUNS]
            self.table.delete(old)

    # -- listings and removal (shoal collections / sources / forget / delete) ----------------------

    def source_rows(self, collection: str) -> list[SourceRow]:
        """Every recorded source of a collection: path, root, rel, status, error, chunks, updated_at."""
        with self._mu:
            docs = self.table.scan("source", collection)
        rows = [
            SourceRow(
                path=_text(d, "path") or "",
                root=_text(d, "root") or "",
                rel=_text(d, "rel") or "",
                status=_text(d, "status") or "",
                error=_text(d, "error"),
                chunks=int(_number(d, "chunks") or 0),
                updated_at=_number(d, "updated_at"),
            )  # fmt: skip
            for d in docs.values()
        ]
        return sorted(rows, key=lambda r: (r["root"], r["rel"]))

    def last_runs(self, collection: str) -> list[RunRow]:
        """The last run of each root of a collection: root, started, finished, status."""
        with self._mu:
            runs = self.table.scan("run", collection)
        last: dict[str, RunRow] = {}
        for d in sorted(runs.values(), key=lambda d: _number(d, "started") or 0.0):
            root = _text(d, "root")
            last[root or ""] = RunRow(
                root=root or "",
                started=_number(d, "started"),
                finished=_number(d, "finished"),
                status=_text(d, "status"),
            )
        return [last[r] for r in sorted(last)]

    def forget_root(self, collection: str, root: str) -> None:
        """Stop tracking a root: its record, its sources' records and its runs."""
        with self._mu:
            keys = [_key("root", collection, root)]
            keys += list(self.table.scan("source", collection, root))
            keys += [k for k, d in self.table.scan("run", collection).items() if d.get("root") == root]
            self.table.delete(keys)

    def drop(self, collection: str) -> None:
        """Every record of a collection."""
        with self._mu:
            keys = [_key("collection", collection)]
            for kind in ("root", "source", "run"):
                keys += list(self.table.scan(kind, collection))
            self.table.delete(keys)
