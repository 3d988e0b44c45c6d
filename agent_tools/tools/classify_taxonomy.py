"""Tool: classify texts into a hierarchical taxonomy (a configured one by name, or one passed inline)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agent_tools.errors import check_count, check_text
from agent_tools.registry import ToolContext, tool
from agent_tools.taxonomy import ClassifyOptions
from agent_tools.taxonomy.classify import classify_index

if TYPE_CHECKING:
    from agent_tools.results import ClassifyResult, TaxonomyInfo

Text = Annotated[str, StringConstraints(min_length=1)]


class _Request(BaseModel):
    texts: list[Text] = Field(min_length=1, description="texts to classify (a product, a ticket, a document)")
    taxonomy: str | dict[str, object] = Field(  # an inline taxonomy is checked by build_taxonomy
        description="the name of a taxonomy the server has, or a taxonomy itself: "
        "{name, children: [{name, description?, examples?, children?}]} or {nodes: [{id, name, parent?}]}"
    )
    model: str | None = Field(None, description="embedding model; default: the server's")


class ClassifyTaxonomyInput(ClassifyOptions, _Request):  # fields: the request's first, then the options
    model_config = ConfigDict(extra="forbid")


@tool("classify_taxonomy", ClassifyTaxonomyInput)
async def classify_taxonomy(ctx: ToolContext, args: ClassifyTaxonomyInput) -> ClassifyResult:
    """Put each text into the right node of a (possibly large) hierarchical taxonomy. Returns, per text, the
    deepest node the classifier is confident about (a leaf, or a broader category when no leaf fits; "" when
    nothing fits), the score and confidence (a calibrated probability of being right) at each level of the best
    path, the best leaf and runner-up leaves. A named taxonomy fitted with `shoal taxonomy fit` uses its fit."""
    s = ctx.settings
    check_count("texts", len(args.texts), s.max_texts)
    for i, text in enumerate(args.texts):
        check_text(f"texts.{i}", text, s.max_text_chars)
    taxonomy = await asyncio.to_thread(ctx.taxonomy, args.taxonomy)
    backend = ctx.backend()
    options = ClassifyOptions.model_validate(args.model_dump(include=set(ClassifyOptions.model_fields)))
    model = args.model or s.embed_model
    index = await ctx.index(args.taxonomy, taxonomy, backend, model)
    results = await classify_index(args.texts, index, backend.with_lora(index.lora), model, options)
    info: TaxonomyInfo = {
        "digest": taxonomy.digest,
        "nodes": len(taxonomy),
        "leaves": len(taxonomy.leaves),
        "fitted": index.fitted is not None,
        "calibration": index.calibration.source,
    }
    return {
        "results": results,
        "taxonomy": info,
        "model_calls": backend.calls.as_dict(),
    }
