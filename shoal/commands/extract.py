"""`shoal extract`: entities (GLiNER) or zero-shot classes (NLI, embedding models) of texts, one JSON line each."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from engine.client.calls import ExtractResult


def extract_command(
    texts: Annotated[
        list[str] | None, typer.Argument(help="texts to extract from; '-' or none reads lines from stdin")
    ] = None,
    model: Annotated[
        str, typer.Option("--model", "-m", help="GLiNER model, NLI cross-encoder or embedding model")
    ] = "urchade/gliner_small-v2.1",
    labels: Annotated[str, typer.Option(help="entity types or classes, comma-separated: person,organisation")] = "",
    threshold: Annotated[float | None, typer.Option(help="minimum score kept (default: the model's)")] = None,
    multi_label: Annotated[
        bool,
        typer.Option("--multi-label", help="classes: every label over the threshold; entities: one span, many labels"),
    ] = False,
    nested: Annotated[bool, typer.Option("--nested", help="entities: allow nested spans (default: flat)")] = False,
    url: Annotated[str | None, typer.Option(help="a shoal server; default runs the engine in-process")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="SHOAL_API_KEY", help="the server's API key")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="extra folder of model cards (*.yaml)")] = None,
) -> None:
    """Extract from texts and print one JSON line per text: {text, entities, classifications}.

    Exit code 1 on a bad model, labels or input (one line: CODE: message, and a hint when there is one), 2
    when --url cannot be reached.
    """
    lines = texts if texts and texts != ["-"] else [ln.rstrip("\n") for ln in sys.stdin if ln.strip()]
    if not lines:
        raise typer.BadParameter("no texts given (pass them as arguments or on stdin)")
    wanted = [label.strip() for label in labels.split(",")] if labels.strip() else []
    if not wanted:
        raise typer.BadParameter("name at least one label: --labels person,organisation")
    options: dict[str, float | bool] = {}
    if threshold is not None:
        options["threshold"] = threshold
    if multi_label:
        options["multi_label"] = True
    if nested:
        options["flat_ner"] = False
    import time

    from pipeline.cli_output import plural, summary, working

    started = time.perf_counter()
    with working(f"extracting from {plural(len(lines), 'text')} with {model}"):
        results = _extract(url, api_key, model_dir, model, list(lines), wanted, options or None)
    for text, r in zip(lines, results, strict=True):
        print(json.dumps({"text": text, "entities": r["entities"], "classifications": r["classifications"]}))
    found = sum(len(r["entities"]) + len(r["classifications"]) for r in results)
    took = time.perf_counter() - started
    summary(f"{found} entities and classes in {plural(len(lines), 'text')} with {model} in {took:.1f} s")


def _extract(
    url: str | None,
    api_key: str | None,
    model_dir: Path | None,
    model: str,
    texts: list[str],
    labels: list[str],
    options: dict[str, float | bool] | None,
) -> list[ExtractResult]:
    if url:
        from engine.client.sync import Client

        with Client(url, api_key=api_key) as c:
            return c.extract(model, list(texts), labels=labels, options=options)
    from engine.client.retry import RetryPolicy
    from engine.config import EngineSettings
    from engine.runtime import Engine

    settings = EngineSettings(model_dir=model_dir) if model_dir else None
    with Engine(settings, retry=RetryPolicy()) as e:  # a slow first load is waited for
        return e.extract(model, list(texts), labels=labels, options=options)
