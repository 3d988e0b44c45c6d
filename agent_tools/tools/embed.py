"""Tool: dense embeddings of texts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agent_tools.errors import check_count, check_text
from agent_tools.registry import ToolContext, tool

if TYPE_CHECKING:
    from agent_tools.results import EmbedResult
    from engine.tasks.results import JSONObject


class EmbedInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    texts: list[Annotated[str, StringConstraints(min_length=1)]] = Field(min_length=1, description="texts to embed")
    model: str | None = Field(None, description="embedding model; default: the server's")
    is_query: bool = Field(False, description="embed as search queries (adds the model's query instruction)")
    dimensions: int | None = Field(None, ge=1, description="Matryoshka truncation to this many dimensions")


@tool("embed", EmbedInput)
async def embed(ctx: ToolContext, args: EmbedInput) -> EmbedResult:
    """Embed texts with a dense embedding model; returns one vector (a list of floats) per text, in order."""
    s = ctx.settings
    check_count("texts", len(args.texts), s.max_texts)
    for i, text in enumerate(args.texts):
        check_text(f"texts.{i}", text, s.max_text_chars)
    model = args.model or s.embed_model
    options: JSONObject | None = {"dimensions": args.dimensions} if args.dimensions else None
    backend = ctx.backend()
    rows = await backend.encode(model, list(args.texts), is_query=args.is_query, options=options)
    vectors = [[float(x) for x in r["dense"]] for r in rows]
    dims = len(vectors[0]) if vectors else 0
    return {"model": model, "dims": dims, "embeddings": vectors, "model_calls": backend.calls.as_dict()}
