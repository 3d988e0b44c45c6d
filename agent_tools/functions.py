"""The tools as plain Python functions, generated from the same definitions (one blocking, one async each).

With `classify_taxonomy` and `aclassify_taxonomy` imported from `agent_tools`:

    result = classify_taxonomy(texts=["wireless earbuds"], taxonomy=tree_dict)          # in-process engine
    result = classify_taxonomy(texts=[...], taxonomy=..., client=shoal.Client(url))     # any sync client
    result = await aclassify_taxonomy(texts=[...], taxonomy=..., client=async_engine)   # any client

Keyword arguments are the tool's input fields, validated exactly as over HTTP or MCP.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agent_tools.config import ToolSettings
from agent_tools.registry import OpenAITool, Tool, ToolContext

_default: ToolContext | None = None
_lock = threading.Lock()

if TYPE_CHECKING:
    from agent_tools.results import ToolResult
    from engine.client.protocol import ShoalClient

AsyncToolFunction = Callable[..., Awaitable["ToolResult"]]  # keyword arguments: the tool's input fields
SyncToolFunction = Callable[..., "ToolResult"]


def default_context() -> ToolContext:
    """A process-wide in-process engine, started on first use and closed at exit (as every Engine is)."""
    global _default
    with _lock:
        if _default is None:
            from engine.runtime import Engine

            _default = ToolContext(Engine())
        return _default


def context_for(client: ShoalClient | None, settings: ToolSettings | None) -> ToolContext:
    if client is None:
        return default_context() if settings is None else ToolContext(default_context().client, settings)
    return ToolContext(client, settings)


def _signature(t: Tool) -> inspect.Signature:
    params = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if f.is_required() else f.default,
            annotation=f.annotation,
        )
        for name, f in t.input.model_fields.items()
    ]
    params.append(inspect.Parameter("client", inspect.Parameter.KEYWORD_ONLY, default=None))
    params.append(inspect.Parameter("settings", inspect.Parameter.KEYWORD_ONLY, default=None))
    return inspect.Signature(params, return_annotation=dict[str, object])


def async_function(t: Tool) -> AsyncToolFunction:
    async def call(
        *, client: ShoalClient | None = None, settings: ToolSettings | None = None, **arguments: object
    ) -> ToolResult:
        return await t.run(context_for(client, settings), t.parse(arguments))

    call.__name__ = call.__qualname__ = f"a{t.name}"
    call.__doc__ = (
        f"{t.description}\n\nAsync; `client` may be any shoal client (Engine, Client, AsyncEngine, AsyncClient)."
    )
    call.__signature__ = _signature(t)  # type: ignore[attr-defined]
    return call


def sync_function(t: Tool) -> SyncToolFunction:
    def call(
        *, client: ShoalClient | None = None, settings: ToolSettings | None = None, **arguments: object
    ) -> ToolResult:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(t.run(context_for(client, settings), t.parse(arguments)))
        raise RuntimeError(f"{t.name}() blocks; inside an event loop use `await agent_tools.a{t.name}(...)`")

    call.__name__ = call.__qualname__ = t.name
    call.__doc__ = (
        f"{t.description}\n\nBlocking; `client` may be a shoal Engine or Client (default: in-process engine)."
    )
    call.__signature__ = _signature(t)  # type: ignore[attr-defined]
    return call


def functions() -> dict[str, AsyncToolFunction | SyncToolFunction]:
    """`name` (blocking) and `aname` (async) for every tool."""
    from agent_tools.tools import TOOLS

    out: dict[str, AsyncToolFunction | SyncToolFunction] = {}
    for t in TOOLS.values():
        out[t.name] = sync_function(t)
        out[f"a{t.name}"] = async_function(t)
    return out


def openai_tools() -> list[OpenAITool]:
    """Every tool's OpenAI function-calling schema (what `GET /v1/tools` answers)."""
    from agent_tools.tools import TOOLS

    return [t.openai() for t in TOOLS.values()]
