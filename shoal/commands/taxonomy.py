"""`shoal taxonomy fit`: fit a taxonomy's routing to labelled texts and save the fitted index beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from agent_tools.taxonomy.fit import FitReport, FitResult
    from agent_tools.taxonomy.tune import Encoder

app = typer.Typer(help="Taxonomies for classify_taxonomy: fit one to labelled texts.", no_args_is_help=True)


@app.command("fit")
def fit_command(
    taxonomy: Annotated[Path, typer.Argument(help="the taxonomy file (YAML or JSON)")],
    labelled: Annotated[
        Path | None,
        typer.Option(
            help='JSONL of {"text", "label"}: a node id, path or unique name; "" for a text that fits nothing'
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="embedding model (default: the tools')")] = None,
    folds: Annotated[
        int, typer.Option(min=2, max=20, help="cross-validation folds (settings and held-out figures)")
    ] = 5,
    output: Annotated[Path | None, typer.Option(help="where to save (default: TAXONOMY's stem + .fit.npz)")] = None,
    tune: Annotated[
        bool,
        typer.Option(
            "--tune",
            help="also tune the embedding model to the texts: a LoRA adapter saved beside the index (minutes on a CPU)",
        ),
    ] = False,
    url: Annotated[str | None, typer.Option(help="a shoal server; default runs the engine in-process")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="SHOAL_API_KEY", help="the server's API key")] = None,
) -> None:
    """Fit TAXONOMY to labelled texts (the --labelled file and the examples in the taxonomy): a linear head
    over the leaves and the confidence calibration. Prints held-out accuracy by cross-validation and saves
    the fitted index beside the taxonomy, where `shoal serve --taxonomy` and `shoal mcp --taxonomy` find it.

    With --tune, each cross-validation fold (at most 3) and the final fit first train a LoRA adapter of the
    model on the texts (in-process, on this machine's CPU); `classify_taxonomy` then embeds texts with it.

    Exit code 1 on a bad taxonomy or labelled file (every bad line named), 2 when --url cannot be reached.
    """
    import asyncio

    from agent_tools.backend import ModelBackend
    from agent_tools.config import ToolSettings
    from agent_tools.taxonomy.fit import fit, fitted_path, read_labelled, save_fitted, taxonomy_examples
    from agent_tools.taxonomy.tree import load_taxonomy

    settings = ToolSettings()
    t = load_taxonomy(taxonomy, settings.max_taxonomy_nodes)
    rows = taxonomy_examples(t)
    if labelled is not None:
        rows += read_labelled(labelled, t, settings.max_labelled_texts, settings.max_text_chars)
    name = model or settings.embed_model
    target = output or fitted_path(taxonomy)
    if tune and url:
        raise typer.BadParameter("tuning trains on this machine with the engine in-process; drop --url", param_hint="--tune")  # fmt: skip

    async def run(work: Path) -> FitReport:
        # on a terminal, a spinner for the whole fit and a bar per tuning run, on stderr: stdout is the report
        with working(_doing(taxonomy, len(rows), folds, tune)) as bar:
            if url:
                from engine.client.http import AsyncClient

                async with AsyncClient(url, api_key=api_key) as client:
                    result = await fit(t, ModelBackend(client, settings.batch_size), name, rows, folds)
            else:
                from agent_tools.taxonomy.tune import local_tuner
                from engine.client.retry import RetryPolicy
                from engine.runtime import AsyncEngine

                tuner = local_tuner(encoder_of(name), work, bar) if tune else None
                async with AsyncEngine(retry=RetryPolicy()) as engine:
                    result = await fit(t, ModelBackend(engine, settings.batch_size), name, rows, folds, tuner)
        save_fitted(target, t, name, result)  # the index first, recording its adapter's digest; then the adapter
        place_adapter(target, result)
        return result.report

    import tempfile
    import time

    from pipeline.cli_output import summary, working

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shoal-tune-") as work:
        report = asyncio.run(run(Path(work)))
    typer.echo(json.dumps({"saved": str(target), "model": name, **report}, indent=1))
    summary(_summary(target, report, time.perf_counter() - started))


def _doing(taxonomy: Path, texts: int, folds: int, tune: bool) -> str:
    tuning = ", tuning the model on this CPU (minutes)" if tune else ""
    return f"fitting {taxonomy.name} to {texts} texts, {folds}-fold cross-validation{tuning}"


def _summary(target: Path, report: FitReport, took: float) -> str:
    """The fit in one line: what it was fitted on, its held-out accuracy, and where it was saved."""
    top1 = report["cv_top1_leaf"]
    zero = report["cv_top1_leaf_zero_shot"]
    held = f"held-out top-1 {top1:.3f}" if top1 is not None else "no held-out figure (too few texts)"
    if top1 is not None and zero is not None:
        held += f" (zero-shot {zero:.3f})"
    tuned = " with a tuned adapter" if report["tuned"] else ""
    texts = report["labelled_texts"] + report["leaf_texts"]
    return f"fitted on {texts} texts in {took:.0f} s: {held}; saved {target}{tuned}"


def place_adapter(target: Path, result: FitResult) -> None:
    """Move a tuned fit's adapter beside the fitted index (replacing an older one); drop a stale one."""
    import shutil

    from agent_tools.adapter_files import place
    from agent_tools.taxonomy.tune import adapter_folder

    folder = adapter_folder(target)
    if result.lora is not None:
        place(Path(result.lora), folder)
        result.lora = str(folder)
    elif folder.exists():
        shutil.rmtree(folder)


def encoder_of(model: str) -> Encoder:
    """What tuning trains: the model's weights on this machine, its pooling and its input prefixes."""
    from agent_tools.taxonomy.tune import Encoder
    from engine.catalogue.catalogue import Catalogue
    from engine.catalogue.weights import resolve_weights

    card = Catalogue().get(model)
    prefixes = card.query_instruction or "", card.document_instruction or ""
    return Encoder(resolve_weights(card), card.pooling, *prefixes)
