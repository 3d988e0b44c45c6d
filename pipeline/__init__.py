"""Documents in, tasks out: sources, parsers, chunking, enrichment, the ingest manifest; `ingest` and `search`.

The names below resolve on first use, so importing the package (or its command-line module) stays light.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig, load_config
    from pipeline.run import ingest, ingest_async
    from pipeline.search import Searcher, search, search_async
    from pipeline.summary import IngestSummary

_HOMES = {
    "PipelineConfig": "pipeline.config",
    "load_config": "pipeline.config",
    "ingest": "pipeline.run",
    "ingest_async": "pipeline.run",
    "search": "pipeline.search",
    "search_async": "pipeline.search",
    "Searcher": "pipeline.search",
    "IngestSummary": "pipeline.summary",
}
__all__ = [
    "IngestSummary",
    "PipelineConfig",
    "Searcher",
    "ingest",
    "ingest_async",
    "load_config",
    "search",
    "search_async",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


class _Package(types.ModuleType):
    """`pipeline.search` stays the function when the `pipeline.search` submodule is imported (which would
    otherwise set the package attribute to the module); `from pipeline.search import X` is unaffected."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _HOMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
