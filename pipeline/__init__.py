"""Documents in, tasks out: sources, parsers, chunking, enrichment, the ingest manifest; `ingest` and `search`."""

from pipeline.config import PipelineConfig, load_config
from pipeline.run import ingest, ingest_async
from pipeline.search import search, search_async
from pipeline.summary import IngestSummary

__all__ = ["IngestSummary", "PipelineConfig", "ingest", "ingest_async", "load_config", "search", "search_async"]
