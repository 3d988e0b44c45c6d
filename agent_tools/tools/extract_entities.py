"""Tool: named entities of the given types in texts (GLiNER through the engine's extract task)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agent_tools.errors import check_count, check_text
from agent_tools.registry import ToolContext, tool

if TYPE_CHECKING:
    from agent_tools.results import ExtractEntitiesResult, TextEntities
    from engine.tasks.results import Entity, JSONObject

Label = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class ExtractEntitiesInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    texts: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        min_length=1, description="texts to extract from; long texts are read whole, in overlapping windows"
    )
    labels: list[Label] = Field(
        min_length=1, max_length=256, description="entity types to find, e.g. person, organisation, date, amount"
    )
    threshold: float | None = Field(None, ge=0, le=1, description="minimum score kept (default: the model's, 0.5)")
    model: str | None = Field(None, description="GLiNER model; default: the server's extraction model")


@tool("extract_entities", ExtractEntitiesInput)
async def extract_entities(ctx: ToolContext, args: ExtractEntitiesInput) -> ExtractEntitiesResult:
    """Find named entities of the given types (people, organisations, dates, amounts, product codes...) in
    texts; returns, per text, each entity's text, label, score and character offsets."""
    s = ctx.settings
    check_count("texts", len(args.texts), s.max_texts)
    for i, text in enumerate(args.texts):
        check_text(f"texts.{i}", text, s.max_text_chars)
    model = args.model or s.extract_model
    options: JSONObject | None = {"threshold": args.threshold} if args.threshold is not None else None
    backend = ctx.backend()
    rows = await backend.extract(model, list(args.texts), list(args.labels), options)
    results: list[TextEntities] = [
        {"index": i, "entities": [_entity(e) for e in row["entities"]]} for i, row in enumerate(rows)
    ]
    return {"model": model, "results": results, "model_calls": backend.calls.as_dict()}


def _entity(e: Entity) -> Entity:
    """The fields a tool result shows, in this order."""
    return {"text": e["text"], "label": e["label"], "score": e["score"], "start": e["start"], "end": e["end"]}
