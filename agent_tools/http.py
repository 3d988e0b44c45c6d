"""HTTP endpoints for the tools: `GET /v1/tools` (OpenAI function schemas) and `POST /v1/tools/{name}`.

`tools_router(client)` returns a FastAPI router; `shoal serve` mounts it on the engine's app. Errors use the
native error body `{"detail": {"code", "message"}}` whatever app the router is mounted on.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal, TypedDict

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from agent_tools.config import ToolSettings
from agent_tools.errors import PayloadTooLarge, ShoalError
from agent_tools.registry import OpenAITool, ToolContext
from engine.wire import BodyLimits, check_shape, loads_json

log = logging.getLogger("shoal.tools")
TOOL_DEPTH = 64  # nesting of tool arguments (inline taxonomies nest; nothing else does)

if TYPE_CHECKING:
    from engine.client.protocol import ShoalClient
    from engine.tasks.results import JSONObject, JSONValue


class ToolList(TypedDict):
    """`GET /v1/tools`: every tool's OpenAI function-calling entry."""

    object: Literal["list"]
    tools: list[OpenAITool]


def error_response(err: ShoalError) -> JSONResponse:
    headers = {"Retry-After": str(max(1, round(err.retry_after)))} if err.retry_after is not None else None
    return JSONResponse({"detail": err.to_dict()}, status_code=err.status, headers=headers)


def tools_router(
    client: ShoalClient, settings: ToolSettings | None = None, context: ToolContext | None = None
) -> APIRouter:
    """The tool endpoints over one shoal client (the serving AsyncEngine, or any SDK client)."""
    ctx = context or ToolContext(client, settings)
    router = APIRouter()

    @router.get("/v1/tools", response_model=dict[str, object])  # the OpenAPI document's plain object, as before
    async def list_tools() -> ToolList:
        """`{"tools": [...]}`: pass `tools` straight to an OpenAI-compatible chat completion."""
        from agent_tools.tools import TOOLS

        return {"object": "list", "tools": [t.openai() for t in TOOLS.values()]}

    @router.post("/v1/tools/{name}", openapi_extra=arguments_body())
    async def call_tool(name: str, request: Request) -> JSONResponse:
        """Run a tool; the body is its arguments as a JSON object (what the model put in `arguments`)."""
        from agent_tools.tools import call_tool as run_tool

        try:
            s = ctx.settings
            limits = BodyLimits(TOOL_DEPTH, max(65_536, s.max_texts, s.max_taxonomy_nodes))
            arguments = await read_json(request, s.max_body_bytes, limits)
            return JSONResponse(await run_tool(ctx, name, arguments))
        except ShoalError as e:
            return error_response(e)
        except Exception:  # noqa: BLE001 - a typed 500; the server keeps running
            log.exception("tool %s failed", name)
            return error_response(ShoalError(f"{name} failed on the server; its log has the details"))

    return router


def arguments_body() -> JSONObject:
    """The OpenAPI request body of POST /v1/tools/{name}: one of the tools' argument objects."""
    from agent_tools.tools import TOOLS

    schemas: list[JSONValue] = []
    for t in TOOLS.values():
        fn = t.openai()["function"]
        schemas.append({"title": fn["name"], **fn["parameters"]})
    schema: JSONObject = {
        "description": "the named tool's arguments (GET /v1/tools lists each tool's schema)",
        "oneOf": schemas,
    }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


async def read_json(request: Request, limit: int, limits: BodyLimits | None = None) -> object:
    """The body as JSON, not yet validated (`Tool.parse` checks it; an empty body is `{}`), refused when over
    the byte limit or, with `limits`, too deep or too long."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body of {declared} bytes is over the limit of {limit} (SHOAL_TOOLS_MAX_BODY_BYTES)")
    raw = await request.body()
    if len(raw) > limit:
        raise PayloadTooLarge(f"body of {len(raw)} bytes is over the limit of {limit} (SHOAL_TOOLS_MAX_BODY_BYTES)")
    if not raw.strip():
        return {}
    body = loads_json(raw)  # InvalidInput for bad syntax, bad UTF-8, 4,300-digit integers, NaN
    if limits is not None:
        check_shape(body, limits)
    return body
