"""Tools for agents: classify into a taxonomy, filter context, rerank, search, embed, extract entities; schemas,
endpoints, MCP.

Importing this package is cheap (no torch, no models): the functions below load what they need when called.

    from agent_tools import classify_taxonomy, filter_context, rerank, search, embed, extract_entities  # blocking
    from agent_tools import aclassify_taxonomy, afilter_context, ...                    # async
    from agent_tools import openai_tools, TOOLS, ToolContext, load_taxonomy
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_FROM = {
    "TOOLS": "agent_tools.tools",
    "get_tool": "agent_tools.tools",
    "Tool": "agent_tools.registry",
    "ToolContext": "agent_tools.registry",
    "ToolSettings": "agent_tools.config",
    "Taxonomy": "agent_tools.taxonomy_tree",
    "load_taxonomy": "agent_tools.taxonomy_tree",
    "build_taxonomy": "agent_tools.taxonomy_tree",
    "ClassifyOptions": "agent_tools.taxonomy",
    "FilterOptions": "agent_tools.context_filter",
    "openai_tools": "agent_tools.functions",
    "tools_router": "agent_tools.http",
    "count_tokens": "agent_tools.text",
}
_FUNCTIONS = ("classify_taxonomy", "filter_context", "rerank", "search", "embed", "extract_entities")

__all__ = [*_FROM, *_FUNCTIONS, *(f"a{n}" for n in _FUNCTIONS)]


def __getattr__(name: str) -> Any:
    """Lazy attributes (PEP 562): the tool functions are generated from their definitions on first use."""
    import importlib

    if name in _FROM:
        return getattr(importlib.import_module(_FROM[name]), name)
    if name in _FUNCTIONS or (name.startswith("a") and name[1:] in _FUNCTIONS):
        from agent_tools.functions import functions

        value = functions()[name]
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agent_tools' has no attribute {name!r}")
