"""Tools for agents: classify, filter, extract, rerank, search; schemas, endpoints and an MCP server."""
