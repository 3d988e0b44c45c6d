"""Documents in, tasks out: sources, parsers, chunking, enrichment, the ingest manifest."""
