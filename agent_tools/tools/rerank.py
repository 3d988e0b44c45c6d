"""Tool: order documents by relevance to a query."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agent_tools.context_filter import Scorer
from agent_tools.errors import check_count, check_text
from agent_tools.registry import ToolContext, tool
from engine.errors import ModelUnavailable

if TYPE_CHECKING:
    from agent_tools.results import Ranked, RerankResult


class RerankInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="what the documents should be relevant to")
    documents: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        min_length=1, description="the documents to order"
    )
    top_n: int | None = Field(None, ge=1, description="return only the best n")
    model: str | None = Field(None, description="cross-encoder; default: the server's reranker, else embeddings")


@tool("rerank", RerankInput)
async def rerank(ctx: ToolContext, args: RerankInput) -> RerankResult:
    """Rerank documents for a query with a cross-encoder, or embedding similarity when no reranker is set or
    the server's default reranker has no weights (`scorer` then says `embedding:MODEL (fallback: ...)`);
    returns the documents best first with their index in the input and their score."""
    s = ctx.settings
    check_count("documents", len(args.documents), s.max_texts)
    for i, d in enumerate(args.documents):
        check_text(f"documents.{i}", d, s.max_text_chars)
    check_text("query", args.query, s.max_text_chars)
    backend = ctx.backend()
    scorer = Scorer(backend, s.embed_model, args.model or s.rerank_model)
    fallback = None if scorer.rerank_model else "no reranker configured"
    try:
        found = await scorer(args.query, list(args.documents))
    except ModelUnavailable:
        if args.model is not None:
            raise  # the caller asked for this reranker: say it is not here
        fallback = f"reranker {scorer.rerank_model!r} has no weights here"
        scorer = Scorer(backend, s.embed_model, None)
        found = await scorer(args.query, list(args.documents))
    scores = found.tolist()
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: args.top_n]
    results: list[Ranked] = [{"index": i, "score": round(scores[i], 6), "text": args.documents[i]} for i in order]
    name = f"{scorer.name} (fallback: {fallback})" if fallback else scorer.name
    return {"scorer": name, "results": results, "model_calls": backend.calls.as_dict()}
