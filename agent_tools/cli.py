"""`shoal mcp`: the agent tools as an MCP server (stdio or streamable HTTP); registered by shoal/cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

TaxonomyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--taxonomy", help="a taxonomy file the tools may use, NAME=PATH or PATH (name: file stem); repeatable"
    ),
]


def named_taxonomies(specs: list[str] | None) -> dict[str, Path]:
    """`products=shop.yaml` or `shop.yaml` -> {name: path}; the file must exist."""
    out: dict[str, Path] = {}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        p = Path(path if sep else spec).expanduser()
        if not p.is_file():
            raise typer.BadParameter(f"no taxonomy file {str(p)!r}", param_hint="--taxonomy")
        out[name if sep else p.stem] = p
    return out


def tuned_adapters(taxonomies: dict[str, Path]) -> list[Path]:
    """Where these taxonomies' tuned adapters live (`shoal taxonomy fit --tune`), whether or not one is there
    yet: a server allows them by path from the start, so a tuned fit that lands while it runs is served."""
    from agent_tools.taxonomy_fit import fitted_path
    from agent_tools.taxonomy_tune import adapter_folder

    return [adapter_folder(fitted_path(p)) for p in taxonomies.values()]


def mcp_command(
    transport: Annotated[Literal["stdio", "http"], typer.Option(help="stdio, or streamable HTTP")] = "stdio",
    host: Annotated[str, typer.Option(help="address to bind (http)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on (http)")] = 8090,
    path: Annotated[str, typer.Option(help="URL path of the MCP endpoint (http)")] = "/mcp",
    url: Annotated[
        str | None,
        typer.Option(envvar="SHOAL_TOOLS_ENGINE_URL", help="a shoal server to run models on; default in-process"),
    ] = None,
    taxonomy: TaxonomyOpt = None,
    embed_model: Annotated[str | None, typer.Option(help="embedding model of the tools")] = None,
    rerank_model: Annotated[str | None, typer.Option(help="cross-encoder for filter_context and rerank")] = None,
    db: Annotated[str | None, typer.Option(help="store URI the search tool uses by default")] = None,
    collection: Annotated[str | None, typer.Option(help="collection the search tool uses by default")] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level (http)")] = "warning",
) -> None:
    """Serve the agent tools (classify_taxonomy, filter_context, rerank, search, embed) over MCP."""
    import asyncio

    from agent_tools.config import ToolOverrides, ToolSettings
    from agent_tools.mcp_server import serve_http, serve_stdio

    given: ToolOverrides = {}
    if url is not None:
        given["engine_url"] = url
    if embed_model is not None:
        given["embed_model"] = embed_model
    if rerank_model is not None:
        given["rerank_model"] = rerank_model
    if db is not None:
        given["db"] = db
    if collection is not None:
        given["collection"] = collection
    if taxonomies := named_taxonomies(taxonomy):
        given["taxonomies"] = taxonomies
    settings = ToolSettings(**given)
    try:
        if transport == "stdio":
            asyncio.run(serve_stdio(settings))
        else:
            asyncio.run(serve_http(settings, host, port, path, log_level))
    except KeyboardInterrupt:
        pass
