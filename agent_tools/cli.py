"""`shoal mcp`: the agent tools as an MCP server (stdio or streamable HTTP); registered by shoal/cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

if TYPE_CHECKING:
    from agent_tools.config import ToolSettings
    from engine.http.policy import ServerPolicy

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
    from agent_tools.taxonomy.fit import fitted_path
    from agent_tools.taxonomy.tune import adapter_folder

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
    local_models: Annotated[
        bool,
        typer.Option(
            "--local-models/--no-local-models",
            envvar="SHOAL_LOCAL_MODELS",
            help="let tool calls name local model folders (off: catalogue ids and --model-root folders only)",
        ),
    ] = False,
    model_root: Annotated[
        list[Path] | None,
        typer.Option(help="folder whose checkpoint sub-folders are served by their relative name (repeatable)"),
    ] = None,
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
    policy = server_policy(settings, local_models, model_root or [])
    try:
        if transport == "stdio":
            asyncio.run(serve_stdio(settings, policy))
        else:
            asyncio.run(serve_http(settings, policy, host, port, path, log_level))
    except KeyboardInterrupt:
        pass


def server_policy(settings: ToolSettings, local_models: bool, model_roots: list[Path]) -> ServerPolicy:
    """The policy `shoal serve` would run these tools under (engine.http.policy); a key configuration it
    cannot use is a one-line error, exit 1."""
    from engine.config import EngineSettings
    from engine.http.auth import AuthConfigError
    from engine.http.policy import ServerPolicy

    engine = EngineSettings(local_models=local_models)
    if model_roots:  # else SHOAL_MODEL_ROOTS, as `shoal serve` reads it
        engine = EngineSettings(local_models=local_models, model_roots=model_roots)
    try:
        return ServerPolicy.of(engine, tuned_adapters(settings.taxonomies))
    except AuthConfigError as e:
        typer.echo(f"INVALID_CONFIG: refusing to start: {e}\n  see docs/security.md", err=True)
        raise typer.Exit(1) from None
