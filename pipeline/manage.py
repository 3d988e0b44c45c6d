"""What is in a store and how to remove it: collections, sources (manifest + store counts), forget, delete.

Listings only read (no store or manifest is created). Removals take the same lock as an ingest, change the
store first and the manifest after, so a crash in between leaves chunks the next ingest sweeps as orphans.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from connectors.base import VectorStore, delete_source
from connectors.filters import Cond
from pipeline.config import ConfigError
from pipeline.manifest import RunRow
from pipeline.state import ManifestLike, manifest_for
from pipeline.stores import open_existing, read_manifest


@dataclass
class CollectionInfo:
    """One collection: its chunks, the roots ingested into it and their last runs, its sources by status."""

    name: str
    chunks: int
    roots: list[RunRow] = field(default_factory=list)  # root, started, finished, status
    sources: dict[str, int] = field(default_factory=dict)  # status -> count


@dataclass
class SourceInfo:
    """One source of a collection: where it is, its status, chunk count in the store, when, and why it failed."""

    root: str
    source: str
    path: str | None
    status: str  # ok | failed | pending | untracked (in the store, not in the manifest)
    chunks: int
    updated_at: float | None = None
    error: str | None = None


@contextmanager
def reading(uri: str, state: str | None) -> Iterator[tuple[VectorStore, ManifestLike | None]]:
    store = open_existing(uri)
    manifest = None
    try:
        manifest = read_manifest(store, state)
        yield store, manifest
    finally:
        if manifest is not None:
            manifest.close()
        store.close()


@contextmanager
def writing(uri: str, state: str | None) -> Iterator[tuple[VectorStore, ManifestLike]]:
    """The store and its manifest, locked against a concurrent ingest (the store must exist)."""
    store = open_existing(uri)
    try:
        manifest = manifest_for(store, state)
        try:
            manifest.lock()
            yield store, manifest
        finally:
            manifest.close()
    finally:
        store.close()


def collections(uri: str, state: str | None = None) -> list[CollectionInfo]:
    with reading(uri, state) as (store, manifest):
        out = []
        for name in store.list_collections():
            info = CollectionInfo(name, store.count(name))
            if manifest is not None:
                info.roots = manifest.last_runs(name)
                for r in manifest.source_rows(name):
                    info.sources[r["status"]] = info.sources.get(r["status"], 0) + 1
            out.append(info)
        return out


def sources(uri: str, collection: str, state: str | None = None) -> list[SourceInfo]:
    """Every source of a collection: the manifest's record joined with the store's chunk count."""
    with reading(uri, state) as (store, manifest):
        if collection not in store.list_collections():
            raise ConfigError(f"no collection {collection!r} in {uri}", code="NO_COLLECTION")
        counts = {(s.root, s.source): s.chunks for s in store.sources(collection)}
        rows = manifest.source_rows(collection) if manifest is not None else []
    out = []
    for r in rows:
        chunks = counts.pop((r["root"], r["rel"]), 0)
        out.append(SourceInfo(r["root"], r["rel"], r["path"], r["status"], chunks, r["updated_at"], r["error"]))
    out += [SourceInfo(root, src, None, "untracked", n) for (root, src), n in counts.items()]
    return sorted(out, key=lambda s: (s.root, s.source))


def _candidates(path: str) -> set[str]:
    """The ways a user may name a recorded root: as given (absolute), and resolved (when it still exists)."""
    given = os.path.abspath(os.path.expanduser(path))
    out = {given}
    with suppress(OSError, RuntimeError):
        out.add(str(Path(given).resolve()))
    return out


def find_roots(uri: str, path: str, collection: str | None, state: str | None = None) -> list[tuple[str, str]]:
    """(collection, root) pairs recorded for a path; a one-line error listing the recorded roots if none."""
    with reading(uri, state) as (_, manifest):
        recorded = manifest.roots(collection) if manifest is not None else []
    names = _candidates(path)
    found = [(c, r) for c, r, _ in recorded if r in names]
    if not found:
        inside = sorted({(c, r) for c, r, _ in recorded for n in names if n.startswith(r.rstrip(os.sep) + os.sep)})
        if inside:  # a file (or sub-folder) of an ingested folder: its chunks go with `delete --source`
            coll, root = inside[0]
            raise ConfigError(
                f"{path} is inside the ingested folder {root} (collection {coll}); forget takes a folder or file "
                "given to `shoal ingest`",
                code="NOT_A_ROOT",
                hint=f"`shoal delete --source {path} -c {coll}` removes its chunks; `shoal forget {root}` the folder's",
            )
        known = ", ".join(sorted({r for _, r, _ in recorded})) or "none"
        raise ConfigError(f"{path} is not a recorded root of {uri}; recorded: {known}", code="NOT_FOUND")
    return found


def forget(uri: str, roots: list[tuple[str, str]], keep_chunks: bool, state: str | None = None) -> int:
    """Stop tracking roots (reindex no longer visits them); their chunks go too unless `keep_chunks`."""
    removed = 0
    with writing(uri, state) as (store, manifest):
        for coll, root in roots:
            if not keep_chunks and coll in store.list_collections():
                removed += store.delete_where(coll, Cond("root", "eq", root))
            manifest.forget_root(coll, root)
    return removed


def find_sources(uri: str, source: str, collection: str, state: str | None = None) -> list[SourceInfo]:
    """The sources a name means: an absolute path, or a path relative to its root (any root of the collection)."""
    paths = _candidates(source)
    found = [s for s in sources(uri, collection, state) if s.path in paths or s.source == source]
    if not found:
        raise ConfigError(f"no source {source!r} in collection {collection!r} of {uri}", code="NOT_FOUND")
    return found


def delete_sources(uri: str, collection: str, found: list[SourceInfo], state: str | None = None) -> int:
    """Remove these sources' chunks and their manifest records; returns the chunks removed."""
    removed = 0
    with writing(uri, state) as (store, manifest):
        for s in found:
            removed += delete_source(store, collection, s.source, root=s.root)
        manifest.remove(collection, [s.path for s in found if s.path])
    return removed


def delete_collection(uri: str, collection: str, state: str | None = None) -> bool:
    """Drop a whole collection and every manifest record of it; False when there was none."""
    with writing(uri, state) as (store, manifest):
        dropped = store.drop_collection(collection)
        manifest.drop(collection)
    return dropped
