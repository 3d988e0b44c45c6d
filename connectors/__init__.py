"""One module per vector database behind one small protocol; `open_store(uri)` picks one by URL scheme."""

from connectors.base import Capabilities, CollectionSpec, Hit, SearchRequest, SourceCount, StoreError, VectorStore
from connectors.filters import And, Cond, Filter, FilterError, Or
from connectors.registry import open_store, parse_url

__all__ = [
    "And",
    "Capabilities",
    "CollectionSpec",
    "Cond",
    "Filter",
    "FilterError",
    "Hit",
    "Or",
    "SearchRequest",
    "SourceCount",
    "StoreError",
    "VectorStore",
    "open_store",
    "parse_url",
]
