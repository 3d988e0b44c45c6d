"""`shoal serve`, `shoal worker` and `shoal tune`: run the engine (HTTP server, pull worker) and tune it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent_tools.cli import TaxonomyOpt
from shoal.failures import CliError

if TYPE_CHECKING:  # imported when a command runs, never for --help
    from engine.build import RouterFactory
    from engine.config import EngineSettings

# Options shared by `serve` and `worker` (declared once).
Preload = Annotated[list[str] | None, typer.Option(help="model to load before ready (repeatable)")]
ModelDir = Annotated[Path | None, typer.Option(help="extra folder of model cards (*.yaml)")]
Threads = Annotated[int | None, typer.Option(help="torch CPU threads")]
MaxBatchTokens = Annotated[int | None, typer.Option(help="token budget of one batch (overrides cards)")]
DeviceBudget = Annotated[str | None, typer.Option(help="bytes of models on the device, e.g. 4GB")]
HostBudget = Annotated[str | None, typer.Option(help="bytes of demoted models in host RAM, e.g. 512MB")]
Pin = Annotated[list[str] | None, typer.Option(help="model kept resident, never evicted (repeatable)")]
LoraDir = Annotated[Path | None, typer.Option(help="folder of PEFT LoRA adapters, one per sub-folder")]
PORT_RANGE: dict[str, int] = {"min": 1, "max": 65535}  # click refuses anything else as a usage error (exit 1)
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


def settings_from(**overrides: Any) -> EngineSettings:  # any option's value: EngineSettings checks each
    """EngineSettings from the options a user gave (None means: keep the default / SHOAL_* variable); a
    setting that does not validate is a one-line INVALID_SETTING error (exit 1)."""
    from pydantic import ValidationError

    from engine.config import EngineSettings

    try:
        return EngineSettings(**{k: v for k, v in overrides.items() if v is not None and v != []})
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CliError("INVALID_SETTING", f"{where}: {first['msg']}", "see docs/configuration.md") from None


def check_auth(settings: EngineSettings) -> None:
    """Refuse, in one line, to start with a key configuration the gateway cannot use (it never starts open)."""
    from engine.http.auth import AuthConfigError, auth_from

    try:
        auth_from(settings)
    except AuthConfigError as e:
        raise CliError("INVALID_CONFIG", f"refusing to start: {e}", "see docs/security.md") from None


def check_preload(settings: EngineSettings) -> None:
    """Refuse, in one line, to start with a preload model that is unknown or has no weights here."""
    from engine.catalogue.catalogue import Catalogue
    from engine.catalogue.folders import FolderPolicy
    from engine.catalogue.weights import weights_status
    from engine.errors import ModelUnavailable

    folders = FolderPolicy(settings.local_models, tuple(settings.model_roots))  # as the engine will see them
    catalogue = Catalogue(settings.model_dir, folders, max_id_chars=settings.max_model_id_chars)
    for model in [*settings.preload, *settings.pin]:
        status = weights_status(catalogue.get(model), settings.offline)
        if status.source == "missing":
            raise ModelUnavailable(f"cannot preload {model!r}: {status.summary()}")


def check_bind(host: str, port: int, option: str = "--port") -> None:
    """Refuse, in one line (exit 1), an address this process cannot listen on, before any model is loaded:
    a host that does not resolve or is not this machine's, a port in use or one that needs privileges."""
    import errno
    import socket

    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as e:
        reason = e.strerror if isinstance(e, socket.gaierror) else str(e)
        raise CliError("INVALID_HOST", f"cannot listen on host {host!r}: {reason}", HOST_HINT) from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(addr)
        except OSError as e:
            where = f"{host}:{port}"
            if e.errno == errno.EADDRINUSE:
                hint = f"another process listens there: stop it, or choose another {option}"
                raise CliError("ADDRESS_IN_USE", f"{where} is already in use", hint) from None
            if e.errno == errno.EACCES:
                hint = f"ports below 1024 need privileges: choose another {option}"
                raise CliError("ADDRESS_REFUSED", f"not allowed to listen on {where}", hint) from None
            raise CliError("INVALID_HOST", f"cannot listen on {where}: {e.strerror}", HOST_HINT) from None


HOST_HINT = "--host takes a name or address of this machine, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (all)"


def serve(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on (1-65535)", **PORT_RANGE)] = 8080,
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
        int | None,
        typer.Option(envvar="SHOAL_METRICS_PORT", help="serve /metrics on this port, not the API port", **PORT_RANGE),
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
    db: Annotated[
        str | None,
        typer.Option("--db", envvar="SHOAL_SEARCH_DB", help="a store to search from the console and /v1/search"),
    ] = None,
    collection: Annotated[str | None, typer.Option(help="default collection of --db")] = None,
) -> None:
    """Run the HTTP server and the web console at /: embedded engine, or with --queue a gateway for workers."""
    from agent_tools.cli import named_taxonomies, tuned_adapters

    taxonomies = named_taxonomies(taxonomy)
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
    # a tuned taxonomy fit's adapter is served by its path, next to the folders SHOAL_LORA_FOLDERS names
    settings = settings.model_copy(update={"lora_folders": [*settings.lora_folders, *tuned_adapters(taxonomies)]})
    check_serve(settings)  # before loading anything
    from engine.build import build_app
    from engine.http.server import serve_app

    routers = [tools_routes(taxonomies, search_db, search_collection, db, collection)]
    if db:
        routers.append(search_routes(db, collection))
        from pipeline.discovery import announce

        announce(db, settings.host, settings.port)  # `shoal search` on this store finds this server
    serve_app(build_app(settings, routers), settings, log_level)


def check_serve(settings: EngineSettings) -> None:
    """Every one-line refusal `serve` gives before it loads a model: keys, addresses, preloaded models."""
    check_auth(settings)
    check_bind(settings.host, settings.port)
    if settings.metrics_port is not None:
        if settings.metrics_port == settings.port:
            hint = "give /metrics a port of its own, or leave --metrics-port out"
            raise CliError("ADDRESS_IN_USE", f"--metrics-port {settings.metrics_port} is the API port too", hint)
        check_bind(settings.host, settings.metrics_port, "--metrics-port")
    if not settings.queue_url:  # a gateway loads nothing; its workers check their own models
        check_preload(settings)


def tools_routes(
    taxonomies: dict[str, Path],
    search_dbs: list[str] | None,
    search_collections: list[str] | None,
    db: str | None,
    collection: str | None,
) -> RouterFactory:
    """GET /v1/tools and POST /v1/tools/{name} over the serving engine; the search tool opens only the stores
    and collections configured here (as model folders: off unless asked)."""
    from agent_tools.config import ToolOverrides, ToolSettings
    from agent_tools.http import tools_router

    tools: ToolOverrides = {"open_stores": False, "search_dbs": search_dbs or []}
    tools["search_collections"] = search_collections or []
    if taxonomies:
        tools["taxonomies"] = taxonomies
    if db:
        tools["db"] = db
        if collection:
            tools["collection"] = collection
    settings = ToolSettings(**tools)
    return lambda engine: tools_router(engine, settings)


def search_routes(db: str, collection: str | None) -> RouterFactory:
    """GET/POST /v1/search (the console's page) over one store, queries run through the serving engine."""
    from pipeline.http import search_router

    return lambda engine: search_router(engine, db, collection)


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
    metrics_port: Annotated[
        int | None, typer.Option(help="serve Prometheus /metrics on this port", **PORT_RANGE)
    ] = None,
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
    if metrics_port is not None:
        check_bind(settings.host, metrics_port, "--metrics-port")
    check_preload(settings)
    run_worker(settings, metrics_port)


def tune(
    model: Annotated[str, typer.Argument(help="catalogue id or local checkpoint folder")],
    device: Annotated[str, typer.Option(help="cpu or cuda[:N]")] = "cpu",
    budgets: Annotated[str | None, typer.Option(help="token budgets to try, comma-separated")] = None,
    dtypes: Annotated[
        str | None,
        typer.Option(
            help="precisions to try, comma-separated (default: all this device offers, see docs/residency.md)"
        ),
    ] = None,
    latency_ms: Annotated[float, typer.Option(help="largest acceptable p99 batch latency")] = 500.0,
    requests: Annotated[int, typer.Option(help="synthetic inputs in the workload")] = 256,
    store: Annotated[Path | None, typer.Option(help="profile store (default ~/.cache/shoal/profiles.json)")] = None,
    model_dir: ModelDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Gate each precision against float32, measure token budgets and the precisions that passed on this hardware;
    store the best profile for (model, device) with the gate figures."""
    from rich.console import Console
    from rich.table import Table

    from engine.residency.tune import tune_model

    settings = settings_from(device=device, profile_store=store, model_dir=model_dir)
    grid = [int(b) for b in budgets.split(",")] if budgets else None
    from pipeline.cli_output import working

    with working(f"tuning {model}: the quality gate per precision, then batch budgets (minutes)", show=not as_json):
        report = tune_model(model, settings, grid, dtypes.split(",") if dtypes else None, latency_ms, requests)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    table = Table(title=f"shoal tune {report['model']} on {report['device']}")
    for col in ("dtype", "max_batch_tokens", "tokens/s", "p50 ms", "p99 ms"):
        table.add_column(col)
    for r in report["grid"]:
        row = [r["dtype"], str(r["max_batch_tokens"]), f"{r['tokens_per_s']:.0f}"]
        table.add_row(*row, f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}")
    console = Console()
    console.print(table)
    if report["gates"]:
        gates = Table(title="quality gate against float32 (mean cosine >= 0.99, nDCG@10 drop <= 0.01)")
        for col in ("precision", "mean cosine", "min cosine", "nDCG@10", "float32 nDCG@10", "result"):
            gates.add_column(col)
        for name, g in report["gates"].items():
            figures = (f"{g['mean_cosine']:.4f}", f"{g['min_cosine']:.4f}", f"{g['ndcg_at_10']:.4f}")
            gates.add_row(name, *figures, f"{g['reference_ndcg_at_10']:.4f}", "passed" if g["passed"] else "failed")
        console.print(gates)
    console.print(f"stored profile {report['profile']} in {settings.profile_store}")
