"""Keep only the passages that matter for a query, in their original order, and say how much was cut.

Relevance comes from a reranker (a cross-encoder through the engine's `score` task) or, when none is
configured, from the cosine similarity of query and passage embeddings. A passage is kept when its score
is within `margin` of the best passage's score and at least `threshold`; then, best first, while the kept
passages fit `token_budget` (and `max_passages`). Kept passages come back in document order. With
`sentences`, each kept passage is pruned to its sentences within `sentence_margin` of the best sentence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agent_tools.errors import PayloadTooLarge
from agent_tools.text import Span, count_tokens, split_passages, split_sentences

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend


class FilterOptions(BaseModel):
    """How much to keep."""

    threshold: float | None = Field(None, allow_inf_nan=False, description="lowest score a passage may have to be kept")
    margin: float | None = Field(
        0.1, ge=0, description="keep passages scoring within this of the best one; null keeps all above threshold"
    )
    token_budget: int | None = Field(None, ge=1, description="most tokens (words and punctuation) to keep")
    max_passages: int | None = Field(None, ge=1, description="most passages to keep")
    sentences: bool = Field(False, description="also drop the less relevant sentences inside kept passages")
    sentence_margin: float = Field(0.15, ge=0, description="keep sentences within this of the best sentence")
    passage_tokens: int = Field(120, ge=8, le=2000, description="passage size when a long text is split")
    rerank_model: str | None = Field(None, description="cross-encoder to score with; default: embeddings")


class Scorer:
    """Query-passage relevance: a cross-encoder when a reranker is named, else embedding cosine."""

    def __init__(self, backend: ModelBackend, embed_model: str, rerank_model: str | None) -> None:
        self.backend, self.embed_model, self.rerank_model = backend, embed_model, rerank_model
        self._query: np.ndarray | None = None

    @property
    def name(self) -> str:
        return f"reranker:{self.rerank_model}" if self.rerank_model else f"embedding:{self.embed_model}"

    async def __call__(self, query: str, texts: list[str]) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros(0, dtype=np.float32)
        if self.rerank_model:
            return await self.backend.score(self.rerank_model, query, texts)
        if self._query is None:
            self._query = (await self.backend.embed(self.embed_model, [query], is_query=True))[0]
        return await self.backend.embed(self.embed_model, texts) @ self._query


def select(scores: np.ndarray, tokens: list[int], opts: FilterOptions) -> list[int]:
    """Indices to keep (ascending): above threshold, within margin of the best, best first within budgets."""
    import numpy as np

    if scores.size == 0:
        return []
    floor = -np.inf if opts.threshold is None else opts.threshold
    if opts.margin is not None:
        floor = max(floor, float(scores.max()) - opts.margin)
    keep: list[int] = []
    used = 0
    for i in np.argsort(-scores, kind="stable").tolist():
        if scores[i] < floor or (opts.max_passages is not None and len(keep) >= opts.max_passages):
            break
        if opts.token_budget is not None and used + tokens[i] > opts.token_budget:
            continue  # a shorter, less relevant passage may still fit
        keep.append(i)
        used += tokens[i]
    return sorted(keep)


async def prune_sentences(scorer: Scorer, query: str, spans: list[Span], margin: float) -> list[Span]:
    """Each passage reduced to its sentences scoring within `margin` of its best sentence (one model call)."""
    split = [split_sentences(s.text, s.start) for s in spans]
    flat = [sent.text for sents in split for sent in sents]
    scores = (await scorer(query, flat)).tolist()
    out, k = [], 0
    for span, sents in zip(spans, split, strict=True):
        mine = scores[k : k + len(sents)]
        k += len(sents)
        if not sents:
            out.append(span)
            continue
        best = max(mine)
        kept = [s.text for s, v in zip(sents, mine, strict=True) if v >= best - margin]
        out.append(Span(" ".join(kept), span.start, span.end))
    return out


async def filter_context(
    query: str,
    passages: list[str] | None,
    text: str | None,
    backend: ModelBackend,
    embed_model: str,
    opts: FilterOptions,
    max_passages: int | None = None,
) -> dict[str, Any]:
    """Score, select and (optionally) prune; report tokens before and after."""
    if text is not None:
        spans = split_passages(text, opts.passage_tokens)
        if max_passages is not None and len(spans) > max_passages:
            raise PayloadTooLarge(
                f"text: it splits into {len(spans):,} passages, over the limit of {max_passages:,} (SHOAL_TOOLS_MAX_TEXTS)"
            )
    else:
        spans, pos = [], 0
        for p in passages or []:
            spans.append(Span(p, pos, pos + len(p)))
            pos += len(p) + 2  # offsets in the passages joined by blank lines
    scorer = Scorer(backend, embed_model, opts.rerank_model)
    tokens = [count_tokens(s.text) for s in spans]
    scores = await scorer(query, [s.text for s in spans])
    keep = select(scores, tokens, opts)
    kept = [spans[i] for i in keep]
    if opts.sentences and kept:
        kept = await prune_sentences(scorer, query, kept, opts.sentence_margin)
    out: list[dict[str, Any]] = []
    for i, span in zip(keep, kept, strict=True):
        entry: dict[str, Any] = {
            "index": i,
            "score": round(float(scores[i]), 6),
            "tokens": count_tokens(span.text),
            "text": span.text,
        }
        if text is not None:
            entry |= {"start": span.start, "end": span.end}
        out.append(entry)
    before, after = sum(tokens), sum(e["tokens"] for e in out)
    return {
        "passages": out,
        "text": "\n\n".join(e["text"] for e in out),
        "tokens_before": before,
        "tokens_after": after,
        "reduction": round(1 - after / before, 6) if before else 0.0,
        "kept": len(out),
        "dropped": len(spans) - len(out),
        "scorer": scorer.name,
        "model_calls": backend.calls.as_dict(),
    }
