"""Tools for agents: classify into a taxonomy, filter context, rerank, search, embed, extract entities; schemas,
endpoints, MCP.

Importing this package is cheap (no torch, no models): the functions below load what they need when called.

    from agent_tools import classify_taxonomy, filter_context, rerank, search, embed, extract_entities  # blocking
    from agent_tools import aclassify_taxonomy, afilter_context, ...                    # async
    from agent_tools import openai_tools, TOOLS, ToolContext, load_taxonomy
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the lazy attributes below are, for type checkers
    from agent_tools.config import ToolSettings as ToolSettings
    from agent_tools.context_filter import FilterOptions as FilterOptions
    from agent_tools.functions import AsyncToolFunction, SyncToolFunction
    from agent_tools.functions import openai_tools as openai_tools
    from agent_tools.http import tools_router as tools_router
    from agent_tools.registry import Tool as Tool
    from agent_tools.registry import ToolContext as ToolContext
    from agent_tools.taxonomy import ClassifyOptions as ClassifyOptions
    from agent_tools.taxonomy.tree import Taxonomy as Taxonomy
    from agent_tools.taxonomy.tree import build_taxonomy as build_taxonomy
    from agent_tools.taxonomy.tree import load_taxonomy as load_taxonomy
    from agent_tools.text import count_tokens as count_tokens
    from agent_tools.tools import TOOLS as TOOLS
    from agent_tools.tools import get_tool as get_tool

    classify_taxonomy: SyncToolFunction
    filter_context: SyncToolFunction
    rerank: SyncToolFunction
    search: SyncToolFunction
    embed: SyncToolFunction
    extract_entities: SyncToolFunction
    aclassify_taxonomy: AsyncToolFunction
    afilter_context: AsyncToolFunction
    arerank: AsyncToolFunction
    asearch: AsyncToolFunction
    aembed: AsyncToolFunction
    aextract_entities: AsyncToolFunction

__version__ = "0.1.0"

_FROM = {
    "TOOLS": "agent_tools.tools",
    "get_tool": "agent_tools.tools",
    "Tool": "agent_tools.registry",
    "ToolContext": "agent_tools.registry",
    "ToolSettings": "agent_tools.config",
    "Taxonomy": "agent_tools.taxonomy.tree",
    "load_taxonomy": "agent_tools.taxonomy.tree",
    "build_taxonomy": "agent_tools.taxonomy.tree",
    "ClassifyOptions": "agent_tools.taxonomy",
    "FilterOptions": "agent_tools.context_filter",
    "openai_tools": "agent_tools.functions",
    "tools_router": "agent_tools.http",
    "count_tokens": "agent_tools.text",
}
_FUNCTIONS = ("classify_taxonomy", "filter_context", "rerank", "search", "embed", "extract_entities")

__all__ = [*_FROM, *_FUNCTIONS, *(f"a{n}" for n in _FUNCTIONS)]


def __getattr__(name: str) -> object:
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
