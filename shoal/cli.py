"""The `shoal` command line: serve, worker, encode, models, ingest, search, reindex."""

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


def settings_from(**overrides: Any) -> EngineSettings:
    """EngineSettings from the options a user gave (None means: keep the default / SHOAL_* variable)."""
    from engine.config import EngineSettings

    return EngineSettings(**{k: v for k, v in overrides.items() if v is not None and v != []})


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
) -> None:
    """Run the HTTP server: embedded in-process engine, or with --queue a gateway feeding `shoal worker`s."""
    import uvicorn

    from agent_tools.config import ToolSettings
    from agent_tools.http import tools_router
    from engine.http.app import create_app
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
    )
    engine = AsyncEngine(settings, worker=not settings.queue_url)  # with a queue, workers run elsewhere
    http = create_app(engine)
    tools = ToolSettings(taxonomies=named_taxonomies(taxonomy)) if taxonomy else ToolSettings()
    http.include_router(tools_router(engine, tools))  # GET /v1/tools, POST /v1/tools/{name}
    uvicorn.run(http, host=host, port=port, log_level=log_level)


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
    device: Annotated[str, typer.Option(help="show the precisions `shoal tune` recorded for this device")] = "cpu",
    store: Annotated[Path | None, typer.Option(help="profile store (default ~/.cache/shoal/profiles.json)")] = None,
    model_dir: ModelDir = None,
) -> None:
    """List the model catalogue: tasks, outputs, dims and max length of each card, and the precisions that passed
    the quality gate in the last `shoal tune` on this device."""
    from engine.catalogue.catalogue import Catalogue, model_info
    from engine.residency.store import ProfileStore, device_kind, precision_summary

    settings = settings_from(device=device, profile_store=store, model_dir=model_dir)
    profiles = ProfileStore(settings.profile_store)
    kind = device_kind(device)
    infos = []
    for card in Catalogue(settings.model_dir).known():
        info = model_info(card, False)
        info["precision"] = precision_summary(profiles.report(card.id, kind), profiles.get(card.id, kind))
        infos.append(info)
    if as_json:
        print(json.dumps(infos, indent=2))
        return
    table = Table(title="shoal model catalogue")
    for col in ("model", "family", "tasks", "outputs", "dims", "max len", f"precisions on {kind}"):
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
            precision_cell(i["precision"]),
        )
    console.print(table)


def precision_cell(summary: dict[str, Any] | None) -> str:
    """'int8* (cos 0.9937, nDCG -0.000), float32; bfloat16 failed (cos 0.97)': * marks the one in use."""
    if summary is None:
        return "not tuned"
    cells = []
    for p in summary["precisions"]:
        mark = "*" if p["precision"] == summary["selected"] else ""
        figures = f" (cos {p['mean_cosine']:.4f}, nDCG -{p['ndcg_drop']:.3f})" if "mean_cosine" in p else ""
        cells.append(f"{p['precision']}{mark}{figures}" + (" failed" if p["passed"] is False else ""))
    return ", ".join(cells)


from pipeline.cli import ingest_command, reindex_command, search_command  # noqa: E402

app.command("ingest")(ingest_command)
app.command("search")(search_command)
app.command("reindex")(reindex_command)
app.command("mcp")(mcp_command)


@app.command()
def tune(
    model: Annotated[str, typer.Argument(help="catalogue id or local checkpoint folder")],
    device: Annotated[str, typer.Option(help="cpu or cuda[:N]")] = "cpu",
    budgets: Annotated[str | None, typer.Option(help="token budgets to try, comma-separated")] = None,
    dtypes: Annotated[
        str | None,
        typer.Option(help="precisions to try, comma-separated (default: all this device offers, see README)"),
    ] = None,
    latency_ms: Annotated[float, typer.Option(help="largest acceptable p99 batch latency")] = 500.0,
    requests: Annotated[int, typer.Option(help="synthetic inputs in the workload")] = 256,
    store: Annotated[Path | None, typer.Option(help="profile store (default ~/.cache/shoal/profiles.json)")] = None,
    model_dir: ModelDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Gate each precision against float32, measure token budgets and the precisions that passed on this hardware;
    store the best profile for (model, device) with the gate figures."""
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
    if report["gates"]:
        gates = Table(title="quality gate against float32 (mean cosine >= 0.99, nDCG@10 drop <= 0.01)")
        for col in ("precision", "mean cosine", "min cosine", "nDCG@10", "float32 nDCG@10", "result"):
            gates.add_column(col)
        for name, g in report["gates"].items():
            figures = (f"{g['mean_cosine']:.4f}", f"{g['min_cosine']:.4f}", f"{g['ndcg_at_10']:.4f}")
            gates.add_row(name, *figures, f"{g['reference_ndcg_at_10']:.4f}", "passed" if g["passed"] else "failed")
        console.print(gates)
    console.print(f"stored profile {report['profile']} in {settings.profile_store}")


if __name__ == "__main__":
    app()
