"""Tool: keep only the passages (and optionally sentences) relevant to a query, in their original order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_tools.context_filter import FilterOptions
from agent_tools.context_filter import filter_context as run_filter
from agent_tools.errors import check_count, check_text
from agent_tools.registry import ToolContext, tool

if TYPE_CHECKING:
    from agent_tools.results import FilterResult


class _Request(BaseModel):
    query: str = Field(min_length=1, description="the question or task the context is for")
    passages: list[str] | None = Field(None, description="candidate passages (give these or text)")
    text: str | None = Field(None, description="one long text to split into passages (give this or passages)")


class FilterContextInput(FilterOptions, _Request):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.passages is None) == (self.text is None):
            raise ValueError("give exactly one of 'passages' and 'text'")
        return self


@tool("filter_context", FilterContextInput)
async def filter_context(ctx: ToolContext, args: FilterContextInput) -> FilterResult:
    """Cut a context down to what matters for a query: score passages with a reranker (or embedding
    similarity), keep those above the threshold and within the token budget in their original order, and report
    the tokens before and after. Optionally prune sentences inside the kept passages."""
    s = ctx.settings
    if args.passages is not None:
        check_count("passages", len(args.passages), s.max_texts)
        for i, p in enumerate(args.passages):
            check_text(f"passages.{i}", p, s.max_text_chars)
    else:
        check_text("text", args.text or "", s.max_text_chars)
    options = FilterOptions.model_validate(args.model_dump(include=set(FilterOptions.model_fields)))
    options.rerank_model = options.rerank_model or s.rerank_model
    backend = ctx.backend()
    return await run_filter(args.query, args.passages, args.text, backend, s.embed_model, options, s.max_texts)
