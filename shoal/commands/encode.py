"""`shoal encode`: embed texts in-process or on a server and print one JSON line per text."""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Annotated, Literal, TypedDict, get_args

import typer

if TYPE_CHECKING:
    import numpy as np

    from engine.client.calls import EncodeResult, Item

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# the engine's output dtypes (engine.tasks.task.OUTPUT_DTYPES; a test keeps the two equal), checked before any load
Dtype = Literal["float32", "float16", "int8", "uint8", "binary", "ubinary"]
PACKED = ("binary", "ubinary")  # 8 dims to a byte
Output = Literal["dense", "sparse", "multivector"]
PRODUCES = re.compile(r"cannot produce \[.*?\]; it produces \[([^\]]*)\]")


class EncodeArgs(TypedDict, total=False):
    """The SDK `encode` keyword arguments the options give."""

    is_query: bool | None
    options: dict[str, int] | None
    output_types: list[str]
    output_dtype: str


def dims_of(vec: np.ndarray, dtype: str, dimensions: int | None) -> int:
    """The vector's dimension as the model sees it: (u)binary vectors travel as packed bytes (8 dims each)."""
    if dtype in PACKED:
        return dimensions or int(vec.shape[-1]) * 8
    return int(vec.shape[-1])


def encode(
    texts: Annotated[
        list[str] | None, typer.Argument(help="texts to encode; '-' or none reads lines from stdin")
    ] = None,
    model: Annotated[
        str, typer.Option("--model", "-m", help="catalogue id or local checkpoint folder")
    ] = DEFAULT_MODEL,
    url: Annotated[str | None, typer.Option(help="a shoal server; default runs the engine in-process")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="SHOAL_API_KEY", help="the server's API key")] = None,
    query: Annotated[
        bool, typer.Option("--query", help="encode as queries (adds the card's query instruction)")
    ] = False,
    dimensions: Annotated[int | None, typer.Option(help="Matryoshka truncation to this many dims")] = None,
    dtype: Annotated[
        Dtype, typer.Option(help="float32, float16, int8, uint8, binary or ubinary (the last two: packed bits)")
    ] = "float32",
    output: Annotated[
        Output,
        typer.Option(
            "--output", "-o", help="dense (a vector), sparse (SPLADE term weights) or multivector (one per token)"
        ),
    ] = "dense",
) -> None:
    """Encode texts and print one JSON line per text: {text, dims, dense}, {text, sparse: {indices, values}}
    or {text, tokens, dims, multivector}.

    Exit code 1 on a bad model or input (a model without the output names the ones it has), 2 when --url
    cannot be reached.
    """
    lines = texts if texts and texts != ["-"] else [ln.rstrip("\n") for ln in sys.stdin if ln.strip()]
    if not lines:
        raise typer.BadParameter("no texts given (pass them as arguments or on stdin)")
    options = {"dimensions": dimensions} if dimensions else None
    kwargs: EncodeArgs = {"is_query": query or None, "options": options, "output_types": [output]}
    if output == "dense":
        kwargs["output_dtype"] = dtype
    elif dtype != "float32":
        raise typer.BadParameter(f"--dtype applies to dense output only, not {output}", param_hint="--dtype")
    import time

    from pipeline.cli_output import plural, summary, working

    started = time.perf_counter()
    try:
        with working(f"encoding {plural(len(lines), 'text')} with {model}" + ("" if url else " (loading it here)")):
            results = _encode(url, api_key, model, list(lines), kwargs)
    except Exception as e:
        if found := PRODUCES.search(str(getattr(e, "message", ""))):
            outputs = [o.strip(" '\"") for o in found.group(1).split(",") if o.strip()]
            from shoal.failures import CliError

            options_hint = " or ".join(f"--output {o}" for o in outputs if o in get_args(Output))
            raise CliError(
                "INVALID_INPUT", f"model {model!r} has no {output} output; it produces {', '.join(outputs)}",
                f"pass {options_hint}" if options_hint else "`shoal models` lists each model's outputs",
            ) from None  # fmt: skip
        raise
    for text, r in zip(lines, results, strict=True):
        print(json.dumps({"text": text, **_shown(r, output, dtype, dimensions)}))
    summary(f"encoded {plural(len(lines), 'text')} ({output}) with {model} in {time.perf_counter() - started:.1f} s")


def _encode(
    url: str | None, api_key: str | None, model: str, texts: list[str], kwargs: EncodeArgs
) -> list[EncodeResult]:
    lines: list[Item] = list(texts)
    if url:
        from engine.client.sync import Client

        with Client(url, api_key=api_key) as c:
            return c.encode(model, lines, **kwargs)
    from engine.client.retry import RetryPolicy
    from engine.runtime import Engine

    with Engine(retry=RetryPolicy()) as e:  # a slow first load is waited for, as the pipeline does
        return e.encode(model, lines, **kwargs)


def _shown(r: EncodeResult, output: str, dtype: str, dimensions: int | None) -> dict[str, object]:
    """One result as JSON-ready fields: the dense vector with its dims, sparse term weights, or token vectors."""
    if output == "sparse":
        sp = r["sparse"]
        return {"sparse": {"indices": [int(i) for i in sp["indices"]], "values": [float(v) for v in sp["values"]]}}
    if output == "multivector":
        mv = r["multivector"]
        return {"tokens": int(mv.shape[0]), "dims": int(mv.shape[-1]), "multivector": mv.tolist()}
    vec = r["dense"]
    return {"dims": dims_of(vec, dtype, dimensions), "dense": vec.tolist()}
