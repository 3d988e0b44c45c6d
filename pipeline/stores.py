"""Opening a store and its manifest to read, creating nothing: what search, reindex and the listings use.

A local store (LanceDB, Qdrant or Chroma folder) that does not exist is a one-line NO_STORE error instead of
a new empty folder; a store with no manifest yet reads as "nothing ingested" instead of a new SQLite file.
"""

from __future__ import annotations

from pathlib import Path

from connectors.base import VectorStore
from connectors.registry import open_store, parse_url
from pipeline.config import ConfigError
from pipeline.manifest import Manifest
from pipeline.state import ManifestLike


def open_existing(uri: str) -> VectorStore:
    """The store at `uri`; a local store must exist already (nothing is created)."""
    url = parse_url(uri)
    if url.local and not Path(url.path or "./shoal-data").expanduser().exists():
        raise ConfigError(f"no store at {url.path} ({uri}): nothing has been ingested there", code="NO_STORE")
    return open_store(uri)


def read_manifest(store: VectorStore, state: str | None = None) -> ManifestLike | None:
    """The store's manifest when there is one; None when nothing was ever ingested (no file is created)."""
    if state == "store" or (state is None and store.state_dir() is None):
        from pipeline.manifest_store import StoreManifest

        return StoreManifest(store.state_table(), store.uri)
    folder = Path(state).expanduser().resolve() if state else store.state_dir()
    assert folder is not None
    path = folder / "manifest.sqlite"
    return Manifest(path) if path.is_file() else None
