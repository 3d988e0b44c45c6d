"""`shoal encode`: embed texts in-process or on a server and print one JSON line per text."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Literal

import typer

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# the engine's output dtypes (engine.tasks.task.OUTPUT_DTYPES; a test keeps the two equal), checked before any load
Dtype = Literal["float32", "float16", "int8", "uint8", "binary", "ubinary"]
PACKED = ("binary", "ubinary")  # 8 dims to a byte


def dims_of(vec: Any, dtype: str, dimensions: int | None) -> int:
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
) -> None:
    """Encode texts and print one JSON line per text: {text, dims, dense}.

    Exit code 1 on a bad model or input, 2 when --url cannot be reached.
    """
    lines = texts if texts and texts != ["-"] else [ln.rstrip("\n") for ln in sys.stdin if ln.strip()]
    if not lines:
        raise typer.BadParameter("no texts given (pass them as arguments or on stdin)")
    options = {"dimensions": dimensions} if dimensions else None
    kwargs: dict[str, Any] = {"is_query": query or None, "options": options, "output_dtype": dtype}
    if url:
        from engine.client.sync import Client

        with Client(url, api_key=api_key) as c:
            results = c.encode(model, list(lines), **kwargs)
    else:
        from engine.runtime import Engine

        with Engine() as e:
            results = e.encode(model, list(lines), **kwargs)
    for text, r in zip(lines, results, strict=True):
        vec = r["dense"]
        print(json.dumps({"text": text, "dims": dims_of(vec, dtype, dimensions), "dense": vec.tolist()}))
