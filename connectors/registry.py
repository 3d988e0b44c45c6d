"""Store URLs -> connectors: parses `scheme://...` and imports a store's driver only when that store is used."""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from connectors.base import StoreError, VectorStore

# scheme -> (module, class, pip extra); nothing here is imported until open_store picks it
DRIVERS: dict[str, tuple[str, str, str]] = {
    "lancedb": ("connectors.lancedb", "LanceDBStore", "lancedb"),
    "qdrant": ("connectors.qdrant", "QdrantStore", "qdrant"),
    "qdrant+edge": ("connectors.qdrant_edge", "QdrantEdgeStore", "qdrant"),
    "qdrant+local": ("connectors.qdrant_edge", "QdrantEdgeStore", "qdrant"),  # deprecated alias, see open_store
    "chroma": ("connectors.chroma", "ChromaStore", "chroma"),
    "chroma+local": ("connectors.chroma", "ChromaStore", "chroma"),
    "weaviate": ("connectors.weaviate", "WeaviateStore", "weaviate"),
}
DRIVER_PACKAGES = {
    "lancedb": ("lancedb",),
    "qdrant": ("qdrant_client", "qdrant_edge"),
    "chroma": ("chromadb",),
    "weaviate": ("weaviate",),
}
LOCAL_SCHEMES = ("lancedb", "qdrant+edge", "qdrant+local", "chroma+local")
LOCAL_MODE_DEPRECATED = "qdrant+local:// is deprecated: new stores open on Qdrant Edge, write qdrant+edge://{path}"
LEGACY_DEPRECATED = (
    "{path} is a qdrant-client local-mode store (a slow pure-Python stand-in), opened as before; local mode "
    "will be removed: re-ingest into qdrant+edge://PATH"
)
EXAMPLES = (
    "lancedb://PATH, qdrant://HOST:PORT/COLLECTION, qdrant+edge://PATH, chroma://HOST:PORT/COLLECTION, "
    "chroma+local://PATH, weaviate://HOST:PORT/Collection"
)


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URI: a server's host and port, or a local path; the collection it names; query options."""

    uri: str
    scheme: str
    host: str | None = None
    port: int | None = None
    path: str | None = None  # local stores: the folder
    collection: str | None = None  # server stores: the collection named in the URL path
    params: dict[str, str] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.scheme in LOCAL_SCHEMES

    def flag(self, name: str) -> bool:
        return self.params.get(name, "").lower() in ("1", "true", "yes", "on")


def parse_url(uri: str) -> StoreURL:
    """`lancedb://PATH` (or a bare path), `qdrant+edge://PATH`, `chroma+local://PATH` are local folders;
    `qdrant://`, `chroma://` and `weaviate://HOST:PORT/COLLECTION?opt=v` are servers."""
    if "://" not in uri:
        return StoreURL(uri, "lancedb", path=uri)
    scheme, rest = uri.split("://", 1)
    scheme = scheme.lower()
    if scheme not in DRIVERS:
        raise StoreError(f"unknown store {scheme + '://'!r}; known: {EXAMPLES}", code="UNKNOWN_STORE")
    rest, _, query = rest.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    if scheme in LOCAL_SCHEMES:
        return StoreURL(uri, scheme, path=unquote(rest) or "./shoal-data", params=params)
    parts = urlsplit(f"//{rest}")
    try:
        port = parts.port
    except ValueError:
        raise StoreError(f"bad port in {uri!r}", code="INVALID_STORE_URL") from None
    if not parts.hostname:
        raise StoreError(f"{uri!r} names no host; write {scheme}://HOST:PORT/COLLECTION", code="INVALID_STORE_URL")
    collection = unquote(parts.path.strip("/")) or None
    if collection and "/" in collection:
        raise StoreError(f"{uri!r}: the path must be one collection name", code="INVALID_STORE_URL")
    return StoreURL(uri, scheme, host=parts.hostname, port=port, collection=collection, params=params)


def open_store(uri: str) -> VectorStore:
    """A connected store for a URI; its driver is imported here, on first use."""
    url = parse_url(uri)
    module, cls, extra = DRIVERS[url.scheme]
    if url.scheme == "qdrant+local":
        module, cls = _local_mode(url)
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        missing = e.name.split(".")[0] if e.name else ""
        if missing in DRIVER_PACKAGES[extra]:
            raise StoreError(
                f"{url.scheme}:// stores need the {missing} package: pip install 'shoal[{extra}]'",
                code="MISSING_DRIVER",
            ) from None
        raise
    return getattr(mod, cls)(url)


def _local_mode(url: StoreURL) -> tuple[str, str]:
    """`qdrant+local://`: a folder qdrant-client's local mode wrote opens as before; anything else on Qdrant Edge."""
    folder = Path(url.path or "./shoal-data").expanduser()
    if (folder / "meta.json").exists() and (folder / "collection").is_dir():
        warnings.warn(LEGACY_DEPRECATED.format(path=folder), FutureWarning, stacklevel=3)
        return "connectors.qdrant", "QdrantStore"
    warnings.warn(LOCAL_MODE_DEPRECATED.format(path=url.path), FutureWarning, stacklevel=3)
    return "connectors.qdrant_edge", "QdrantEdgeStore"


def url_collection(uri: str) -> str | None:
    """The collection a server URL names (`qdrant://h:p/NAME`), if any; parsing only, no driver import."""
    return parse_url(uri).collection
