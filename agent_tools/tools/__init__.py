"""The tool list. Each tool is one module: a pydantic input model and an async function, wrapped by `@tool`.

Adding a tool is one module here plus one line in TOOLS (`extract_entities` is the newest: an input model with
texts and labels, and a function that calls the SDK's `extract` through the backend).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_tools.errors import ToolNotFound
from agent_tools.registry import Tool, ToolContext
from agent_tools.tools.classify_taxonomy import classify_taxonomy
from agent_tools.tools.embed import embed
from agent_tools.tools.extract_entities import extract_entities
from agent_tools.tools.filter_context import filter_context
from agent_tools.tools.rerank import rerank
from agent_tools.tools.search import search

if TYPE_CHECKING:
    from agent_tools.results import ToolResult

TOOLS: dict[str, Tool] = {
    t.name: t for t in (classify_taxonomy, filter_context, rerank, search, embed, extract_entities)
}


def get_tool(name: str) -> Tool:
    """The tool named `name`; TOOL_NOT_FOUND listing the tools otherwise."""
    try:
        return TOOLS[name]
    except KeyError:
        raise ToolNotFound(f"no tool named {name!r}; the tools are {', '.join(TOOLS)}") from None


async def call_tool(ctx: ToolContext, name: str, arguments: object) -> ToolResult:
    """Validate and run one tool call in a context (the HTTP router, the MCP server and the functions all
    call tools through here)."""
    t = get_tool(name)
    return await t.run(ctx, t.parse(arguments))
