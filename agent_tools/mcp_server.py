"""The tools as an MCP server (official `mcp` SDK, low-level Server): stdio or streamable HTTP.

On either transport the tools run under the server policy `shoal serve` has (engine.http.policy): model ids
and adapters that are local folders are refused unless --local-models is given, with server paths taken out
of error messages. Over HTTP the server is a network surface like the gateway: with API keys configured
(SHOAL_API_KEY, SHOAL_API_KEYS_FILE, read as the gateway reads them) every request needs `Authorization:
Bearer <key>` (else 401 before the MCP layer sees it), `search` opens only the configured stores and
collections, and the connections have the gateway's deadlines and cap.

Tool errors (bad arguments, a missing collection, a too-large text) come back as a tool result with
`isError: true` and the error's code and message, so the calling model can read and correct them; an
unknown tool name is a protocol error (INVALID_PARAMS), as the MCP specification asks.
"""

from __future__ import annotations

import json
import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from agent_tools.config import ToolSettings
from agent_tools.errors import ShoalError, ToolNotFound
from agent_tools.registry import ToolContext
from engine.http.auth import KeyRing, bearer, key_in_query
from engine.http.policy import ServerPolicy
from engine.http.redact import Scrub

if TYPE_CHECKING:
    from mcp.server import Server, ServerRequestContext

    from engine.client.protocol import ShoalClient

SERVER_NAME = "shoal"
log = logging.getLogger("shoal.tools")


def build_server(ctx: ToolContext, scrub: Scrub = str) -> Server:
    """An `mcp.server.Server` listing every tool and running calls through the context; `scrub` takes server
    paths out of error messages (the server policy's, engine.http.policy)."""
    import mcp_types as types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError

    from agent_tools.tools import TOOLS
    from agent_tools.tools import call_tool as run_tool

    async def list_tools(
        _rctx: ServerRequestContext, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [
            types.Tool(name=t.name, description=t.description, input_schema=t.parameters()) for t in TOOLS.values()
        ]
        return types.ListToolsResult(tools=tools)

    def failure(e: ShoalError) -> types.CallToolResult:
        message = scrub(e.message)
        text = f"{e.code}: {message}"
        error = {"error": {**e.to_dict(), "message": message}}
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=error, is_error=True)

    async def call_tool(_rctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await run_tool(ctx, params.name, params.arguments or {})
        except ToolNotFound as e:
            raise MCPError(code=types.INVALID_PARAMS, message=e.message) from None
        except ShoalError as e:
            return failure(e)
        except Exception:  # noqa: BLE001 - reported to the caller; the server keeps serving
            log.exception("tool %s failed", params.name)
            return failure(ShoalError(f"{params.name} failed on the server; its log has the details"))
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(result))], structured_content=result)

    from agent_tools import __version__

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions="shoal's small-model tools: taxonomy classification, context filtering, rerank, search, embed.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def open_client(settings: ToolSettings, stack: AsyncExitStack, policy: ServerPolicy) -> ShoalClient:
    """The shoal client the tools use: a server at engine_url (its own policy applies there too), else an
    in-process engine run with the policy's settings."""
    if settings.engine_url:
        from engine.client.http import AsyncClient

        return await stack.enter_async_context(AsyncClient(settings.engine_url, api_key=settings.api_key))
    from engine.runtime import AsyncEngine

    return await stack.enter_async_context(AsyncEngine(policy.settings))


async def serve_stdio(settings: ToolSettings, policy: ServerPolicy) -> None:
    """Serve one MCP session on stdin/stdout until the client closes it."""
    from mcp.server.stdio import stdio_server

    async with AsyncExitStack() as stack:
        ctx = ToolContext(await open_client(settings, stack, policy), settings)
        server = build_server(ctx, policy.scrub)
        read, write = await stack.enter_async_context(stdio_server())
        await server.run(read, write, server.create_initialization_options())


def key_gate(app: ASGIApp, keys: KeyRing) -> ASGIApp:
    """`app` behind the API keys: a request without a valid bearer key, or with a key in its URL, is 401."""

    async def gate(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            token = bearer(scope["headers"])
            refused = None
            if key_in_query(scope.get("query_string", b"")):
                refused = "API keys in the URL are refused (URLs end up in logs); send 'Authorization: Bearer <key>'"
            elif token is None or keys.match(token) is None:
                refused = "missing or wrong API key; send 'Authorization: Bearer <key>'"
            if refused is not None:
                body = json.dumps({"detail": {"code": "UNAUTHORIZED", "message": refused}}).encode()
                headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
                headers.append((b"content-length", str(len(body)).encode()))
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return gate


async def serve_http(
    settings: ToolSettings, policy: ServerPolicy, host: str, port: int, path: str = "/mcp", log_level: str = "info"
) -> None:
    """Serve MCP over streamable HTTP at http://host:port{path}, behind the API keys when configured, on the
    same connection layer as `shoal serve` (head deadline, keep-alive, connection cap; engine.http.server);
    the search tool opens only the configured stores (SHOAL_TOOLS_DB, SHOAL_TOOLS_SEARCH_DBS), as on a gateway."""
    import uvicorn

    from engine.http.server import uvicorn_config

    settings = settings.model_copy(update={"open_stores": False})
    async with AsyncExitStack() as stack:
        ctx = ToolContext(await open_client(settings, stack, policy), settings)
        app: ASGIApp = build_server(ctx, policy.scrub).streamable_http_app(
            streamable_http_path=path, host=host, max_request_body_size=settings.max_body_bytes
        )  # the tools' own limits then answer over-size texts with PAYLOAD_TOO_LARGE, as on the other transports
        if policy.auth.keys is not None:
            app = key_gate(app, policy.auth.keys)
        config = uvicorn_config(app, policy.settings, log_level, host=host, port=port, lifespan="on")
        await uvicorn.Server(config).serve()
