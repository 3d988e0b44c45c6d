"""Clients of an engine: the shared call surface, the HTTP client and the synchronous facades."""
