"""Store URLs -> connectors: parses `scheme://...` and imports a store's driver only when that store is used."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from connectors.base import StoreError, VectorStore

# scheme -> (module, class, pip extra); nothing here is imported until open_store picks it
DRIVERS: dict[str, tuple[str, str, str]] = {
    "lancedb": ("connectors.lancedb", "LanceDBStore", "lancedb"),
    "qdrant": ("connectors.qdrant", "QdrantStore", "qdrant"),
    "qdrant+local": ("connectors.qdrant", "QdrantStore", "qdrant"),
    "chroma": ("connectors.chroma", "ChromaStore", "chroma"),
    "chroma+local": ("connectors.chroma", "ChromaStore", "chroma"),
    "weaviate": ("connectors.weaviate", "WeaviateStore", "weaviate"),
}
DRIVER_PACKAGES = {"lancedb": "lancedb", "qdrant": "qdrant_client", "chroma": "chromadb", "weaviate": "weaviate"}
EXAMPLES = (
    "lancedb://PATH, qdrant://HOST:PORT/COLLECTION, qdrant+local://PATH, chroma://HOST:PORT/COLLECTION, "
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
        return self.scheme in ("lancedb", "qdrant+local", "chroma+local")

    def flag(self, name: str) -> bool:
        return self.params.get(name, "").lower() in ("1", "true", "yes", "on")


def parse_url(uri: str) -> StoreURL:
    """`lancedb://PATH` (or a bare path), `qdrant+local://PATH`, `chroma+local://PATH` are local folders;
    `qdrant://`, `chroma://` and `weaviate://HOST:PORT/COLLECTION?opt=v` are servers."""
    if "://" not in uri:
        return StoreURL(uri, "lancedb", path=uri)
    scheme, rest = uri.split("://", 1)
    scheme = scheme.lower()
    if scheme not in DRIVERS:
        raise StoreError(f"unknown store {scheme + '://'!r}; known: {EXAMPLES}", code="UNKNOWN_STORE")
    rest, _, query = rest.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    if scheme in ("lancedb", "qdrant+local", "chroma+local"):
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
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        package = DRIVER_PACKAGES[extra]
        if e.name and e.name.split(".")[0] == package:
            raise StoreError(
                f"{url.scheme}:// stores need the {package} package: pip install 'shoal[{extra}]'",
                code="MISSING_DRIVER",
            ) from None
        raise
    return getattr(mod, cls)(url)


def url_collection(uri: str) -> str | None:
    """The collection a server URL names (`qdrant://h:p/NAME`), if any; parsing only, no driver import."""
    return parse_url(uri).collection
