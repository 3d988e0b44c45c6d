"""The `shoal` command line: serve, worker, encode, extract, models, ingest, search, reindex."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from agent_tools.cli import TaxonomyOpt, mcp_command, named_taxonomies

if TYPE_CHECKING:  # imported lazily at run time to keep --help fast
    from engine.config import EngineSettings

app = typer.Typer(
    help="shoal: serve many small models (embedders, rerankers, sparse, late interaction) from one engine.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# Options shared by `serve` and `worker` (declared once).
Preload = Annotated[list[str] | None, typer.Option(help="model to load before ready (repeatable)")]
ModelDir = Annotated[Path | None, typer.Option(help="extra folder of model cards (*.yaml)")]
Threads = Annotated[int | None, typer.Option(help="torch CPU threads")]
MaxBatchTokens = Annotated[int | None, typer.Option(help="token budget of one batch (overrides cards)")]
DeviceBudget = Annotated[str | None, typer.Option(help="bytes of models on the device, e.g. 4GB")]
HostBudget = Annotated[str | None, typer.Option(help="bytes of demoted models in host RAM, e.g. 512MB")]
Pin = Annotated[list[str] | None, typer.Option(help="model kept resident, never evicted (repeatable)")]
LoraDir = Annotated[Path | None, typer.Option(help="folder of PEFT LoRA adapters, one per sub-folder")]
LocalModels = Annotated[
    bool,
    typer.Option(
        "--local-models/--no-local-models",
        envvar="SHOAL_LOCAL_MODELS",
        help="let clients name any checkpoint folder on this machine as a model (off: catalogue ids and "
        "--model-root folders only)",
    ),
]
ModelRoot = Annotated[
    list[Path] | None,
    typer.Option(help="folder whose checkpoint sub-folders are served by their relative name (repeatable)"),
]
CONFIG_ERROR = 2  # exit code of a server that refuses its configuration (docs/security.md)


def settings_from(**overrides: Any) -> EngineSettings:
    """EngineSettings from the options a user gave (None means: keep the default / SHOAL_* variable); a
    setting that does not validate is a one-line error and exit code 2."""
    from pydantic import ValidationError

    from engine.config import EngineSettings

    try:
        return EngineSettings(**{k: v for k, v in overrides.items() if v is not None and v != []})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        console.print(f"[red]invalid setting[/red] {where}: {first['msg']}", highlight=False, soft_wrap=True)
        raise typer.Exit(CONFIG_ERROR) from None


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
    preload: Preload = None,
    model_dir: ModelDir = None,
    threads: Threads = None,
    max_batch_tokens: MaxBatchTokens = None,
    device_budget: DeviceBudget = None,
    host_budget: HostBudget = None,
    pin: Pin = None,
    lora_dir: LoraDir = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="SHOAL_API_KEY", help="require 'Authorization: Bearer KEY'")
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
    queue: Annotated[
        str | None, typer.Option(envvar="SHOAL_QUEUE_URL", help="nats://host:port: run as a gateway only")
    ] = None,
    taxonomy: TaxonomyOpt = None,
    local_models: LocalModels = False,
    model_root: ModelRoot = None,
    api_keys_file: Annotated[
        Path | None, typer.Option(envvar="SHOAL_API_KEYS_FILE", help="file of API keys, one per line")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(envvar="SHOAL_METRICS_PORT", help="serve /metrics on this port, not the API port")
    ] = None,
    cors_origin: Annotated[
        list[str] | None, typer.Option(help="origin allowed to call the API from a browser (repeatable)")
    ] = None,
    search_db: Annotated[
        list[str] | None, typer.Option(help="store URL the search tool may open besides its default (repeatable)")
    ] = None,
    search_collection: Annotated[
        list[str] | None, typer.Option(help="collection the search tool may open besides its default (repeatable)")
    ] = None,
) -> None:
    """Run the HTTP server: embedded in-process engine, or with --queue a gateway feeding `shoal worker`s."""
    from agent_tools.config import ToolSettings
    from agent_tools.http import tools_router
    from engine.http.app import create_app
    from engine.http.auth import AuthConfigError, auth_from
    from engine.http.server import serve_app
    from engine.runtime import AsyncEngine

    settings = settings_from(
        host=host,
        port=port,
        preload=preload,
        model_dir=model_dir,
        threads=threads,
        max_batch_tokens=max_batch_tokens,
        device_budget=device_budget,
        host_budget=host_budget,
        pin=pin,
        lora_dir=lora_dir,
        api_key=api_key,
        queue_url=queue,
        local_models=local_models,
        model_roots=model_root,
        api_keys_file=api_keys_file,
        metrics_port=metrics_port,
        cors_origins=cors_origin,
    )
    try:
        auth_from(settings)  # a key configuration it cannot use: refuse now, before loading anything
    except AuthConfigError as e:
        console.print(f"[red]refusing to start[/red]: {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(CONFIG_ERROR) from None
    engine = AsyncEngine(settings, worker=not settings.queue_url)  # with a queue, workers run elsewhere
    http = create_app(engine)
    # the search tool opens only the stores and collections configured here (as model folders: off unless asked)
    restricted: dict[str, Any] = {"open_stores": False, "search_dbs": search_db or []}
    restricted["search_collections"] = search_collection or []
    if taxonomy:
        restricted["taxonomies"] = named_taxonomies(taxonomy)
    tools = ToolSettings(**restricted)
    http.include_router(tools_router(engine, tools))  # GET /v1/tools, POST /v1/tools/{name}
    serve_app(http, settings, log_level)


@app.command()
def worker(
    queue: Annotated[str, typer.Option(envvar="SHOAL_QUEUE_URL", help="the shared queue, nats://host:port")],
    models: Annotated[
        list[str] | None, typer.Option("--models", "-m", help="serve only these models (repeatable); default any")
    ] = None,
    preload: Preload = None,
    model_dir: ModelDir = None,
    threads: Threads = None,
    max_batch_tokens: MaxBatchTokens = None,
    device_budget: DeviceBudget = None,
    host_budget: HostBudget = None,
    pin: Pin = None,
    lora_dir: LoraDir = None,
    metrics_port: Annotated[int | None, typer.Option(help="serve Prometheus /metrics on this port")] = None,
    local_models: LocalModels = False,
    model_root: ModelRoot = None,
) -> None:
    """Pull tasks from the shared queue, batch them and answer; run as many as you like, anywhere."""
    from engine.cluster import run_worker

    settings = settings_from(
        queue_url=queue,
        worker_models=models or None,
        preload=preload,
        model_dir=model_dir,
        threads=threads,
        max_batch_tokens=max_batch_tokens,
        device_budget=device_budget,
        host_budget=host_budget,
        pin=pin,
        lora_dir=lora_dir,
        local_models=local_models,
        model_roots=model_root,
    )
    run_worker(settings, metrics_port)


@app.command()
def encode(
    texts: Annotated[
        list[str] | None, typer.Argument(help="texts to encode; '-' or none reads lines from stdin")
    ] = None,
    model: Annotated[
        str, typer.Option("--model", "-m", help="catalogue id or local checkpoint folder")
    ] = DEFAULT_MODEL,
    url: Annotated[str | None, typer.Option(help="a shoal server; default runs the engine in-process")] = None,
    query: Annotated[
        bool, typer.Option("--query", help="encode as queries (adds the card's query instruction)")
    ] = False,
    dimensions: Annotated[int | None, typer.Option(help="Matryoshka truncation to this many dims")] = None,
    dtype: Annotated[str, typer.Option(help="float32, float16, int8 or binary")] = "float32",
) -> None:
    """Encode texts and print one JSON line per text: {text, dims, dense}."""
    from engine.errors import ShoalError

    lines = texts if texts and texts != ["-"] else [ln.rstrip("\n") for ln in sys.stdin if ln.strip()]
    if not lines:
        raise typer.BadParameter("no texts given (pass them as arguments or on stdin)")
    options = {"dimensions": dimensions} if dimensions else None
    kwargs: dict[str, Any] = {"is_query": query or None, "options": options, "output_dtype": dtype}
    try:
        if url:
            from engine.client.sync import Client

            with Client(url) as c:
                results = c.encode(model, list(lines), **kwargs)
        else:
            from engine.runtime import Engine

            with Engine() as e:
                results = e.encode(model, list(lines), **kwargs)
    except ShoalError as e:
        console.print(f"[red]{e.code}[/red]: {e.message}")
        raise typer.Exit(1) from None
    for text, r in zip(lines, results, strict=True):
        vec = r["dense"]
        print(json.dumps({"text": text, "dims": int(vec.shape[-1]), "dense": vec.tolist()}))


@app.command()
def models(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """List the model catalogue: tasks, outputs, dims and max length of each card."""
    from engine.catalogue.catalogue import Catalogue, model_info

    infos = [model_info(c, False) for c in Catalogue().known()]
    if as_json:
        print(json.dumps(infos, indent=2))
        return
    table = Table(title="shoal model catalogue")
    for col in ("model", "family", "tasks", "outputs", "dims", "max len"):
        table.add_column(col)
    for i in infos:
        dims = ", ".join(f"{k}={v}" for k, v in i["dims"].items())
        table.add_row(
            i["name"],
            i["family"],
            ", ".join(i["tasks"]),
            ", ".join(i["outputs"]),
            dims,
            str(i["max_sequence_length"]),
        )
    console.print(table)


from pipeline.cli import ingest_command, reindex_command, search_command  # noqa: E402
from shoal.extract_cli import extract_command  # noqa: E402

app.command("ingest")(ingest_command)
app.command("search")(search_command)
app.command("reindex")(reindex_command)
app.command("mcp")(mcp_command)
app.command("extract")(extract_command)


@app.command()
def tune(
    model: Annotated[str, typer.Argument(help="catalogue id or local checkpoint folder")],
    device: Annotated[str, typer.Option(help="cpu or cuda[:N]")] = "cpu",
    budgets: Annotated[str | None, typer.Option(help="token budgets to try, comma-separated")] = None,
    dtypes: Annotated[str | None, typer.Option(help="precisions to try (CUDA), comma-separated")] = None,
    latency_ms: Annotated[float, typer.Option(help="largest acceptable p99 batch latency")] = 500.0,
    requests: Annotated[int, typer.Option(help="synthetic inputs in the workload")] = 256,
    store: Annotated[Path | None, typer.Option(help="profile store (default ~/.cache/shoal/profiles.json)")] = None,
    model_dir: ModelDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Measure token budgets (and precisions) on this hardware; store the best profile for (model, device)."""
    from engine.errors import ShoalError
    from engine.residency.tune import tune_model

    settings = settings_from(device=device, profile_store=store, model_dir=model_dir)
    grid = [int(b) for b in budgets.split(",")] if budgets else None
    try:
        report = tune_model(model, settings, grid, dtypes.split(",") if dtypes else None, latency_ms, requests)
    except ShoalError as e:
        console.print(f"[red]{e.code}[/red]: {e.message}")
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(report, indent=2))
        return
    table = Table(title=f"shoal tune {report['model']} on {report['device']}")
    for col in ("dtype", "max_batch_tokens", "tokens/s", "p50 ms", "p99 ms"):
        table.add_column(col)
    for r in report["grid"]:
        row = [
            r["dtype"],
            str(r["max_batch_tokens"]),
            f"{r['tokens_per_s']:.0f}",
            f"{r['p50_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
        ]
        table.add_row(*row)
    console.print(table)
    console.print(f"stored profile {report['profile']} in {settings.profile_store}")


if __name__ == "__main__":
    app()
