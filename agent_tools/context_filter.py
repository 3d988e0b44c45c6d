"""Keep only the passages that matter for a query, in their original order, and say how much was cut.

Relevance is hybrid: a model score (a reranker, i.e. a cross-encoder through the engine's `score` task, or
else the cosine similarity of query and passage embeddings) plus `lexical_weight` times BM25 over the
passages of the call (agent_tools/lexical.py: identifiers such as `net.Socket` count whole), each in units
of its own spread over the passages, so neither scale matters. By default the selection adapts to how
peaked that relevance is: a softmax over the passages at the spread's scale, and the best passages are
kept until they hold `keep_mass` of it (one passage when one stands out, several when they are close). A
fixed `margin` on the model score and a `threshold` can be set as well. Then, best first, while the kept
passages fit `token_budget` (and `max_passages`). Kept passages come back in document order. With
`sentences`, each kept passage is pruned the same way at the sentence level (`sentence_mass`), always
keeping its best sentence and any sentence that shares a rare query term, so the answering sentence stays.
A long `text` with Markdown headings is scored passage by passage with the passage's heading path before
it (as ingest embeds chunks), so a passage deep in a section is still found by the section's words.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from agent_tools.errors import PayloadTooLarge
from agent_tools.lexical import bm25, standardise
from agent_tools.text import Span, count_tokens, split_passages, split_sentences

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend
    from agent_tools.results import FilterResult, KeptPassage


HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
KEEP_MASS = 0.8  # the smallest share that kept as many answers as any on examples/context_filter (0.75 lost one)


class FilterOptions(BaseModel):
    """How much to keep."""

    threshold: float | None = Field(None, allow_inf_nan=False, description="lowest score a passage may have to be kept")
    keep_mass: float | None = Field(
        KEEP_MASS,
        gt=0,
        le=1,
        description="adaptive selection: keep the best passages holding this share of the relevance "
        "(a softmax at the scores' own spread); null turns it off",
    )
    margin: float | None = Field(
        None, ge=0, description="also keep only passages whose model score is within this of the best one"
    )
    lexical_weight: float = Field(0.5, ge=0, le=10, description="weight of BM25 next to the model score")
    token_budget: int | None = Field(None, ge=1, description="most tokens (words and punctuation) to keep")
    max_passages: int | None = Field(None, ge=1, description="most passages to keep")
    sentences: bool = Field(False, description="also drop the less relevant sentences inside kept passages")
    sentence_mass: float = Field(0.9, gt=0, le=1, description="share of a kept passage's relevance its sentences keep")
    sentence_margin: float | None = Field(
        None, ge=0, description="instead keep sentences whose model score is within this of the passage's best"
    )
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


TEMPERATURE = 0.5  # of the adaptive softmax over passages, in units of the relevance's spread
SENTENCE_TEMPERATURE = 2.0  # the same over a passage's sentences (both chosen on examples/context_filter)


def relevance(scores: np.ndarray, lexical: np.ndarray, weight: float) -> np.ndarray:
    """Model score and BM25, each standardised over the candidates, summed."""
    return standardise(scores) + weight * standardise(lexical)


def nucleus(relevance: np.ndarray, mass: float, temperature: float = TEMPERATURE) -> np.ndarray:
    """Mask of the best items holding `mass` of a softmax at `temperature` (always at least the best one)."""
    import numpy as np

    order = np.argsort(-relevance, kind="stable")
    weights = np.exp((relevance[order] - relevance[order[0]]) / temperature)
    cumulative = np.cumsum(weights) / weights.sum()
    count = int(np.searchsorted(cumulative, mass - 1e-9)) + 1
    keep = np.zeros(relevance.size, dtype=bool)
    keep[order[:count]] = True
    return keep


def select(scores: np.ndarray, tokens: list[int], opts: FilterOptions, rel: np.ndarray | None = None) -> list[int]:
    """Indices to keep (ascending): the adaptive share, above threshold, within margin, best first within
    budgets."""
    import numpy as np

    if scores.size == 0:
        return []
    rel = standardise(scores) if rel is None else rel
    allowed = np.ones(scores.size, dtype=bool) if opts.keep_mass is None else nucleus(rel, opts.keep_mass)
    if opts.threshold is not None:
        allowed &= scores >= opts.threshold
    if opts.margin is not None:
        allowed &= scores >= float(scores.max()) - opts.margin
    keep: list[int] = []
    used = 0
    for i in np.argsort(-rel, kind="stable").tolist():
        if not allowed[i]:
            continue
        if opts.max_passages is not None and len(keep) >= opts.max_passages:
            break
        if opts.token_budget is not None and used + tokens[i] > opts.token_budget:
            continue  # a shorter, less relevant passage may still fit
        keep.append(i)
        used += tokens[i]
    return sorted(keep)


async def prune_sentences(scorer: Scorer, query: str, spans: list[Span], opts: FilterOptions) -> list[Span]:
    """Each passage reduced to its most relevant sentences (one model call for all of them): the adaptive share
    of the passage's relevance (or those within `sentence_margin` of its best), its best sentence, and any
    sentence holding one of the query's rarer terms (BM25 > 0 among the passage's sentences)."""
    import numpy as np

    split = [split_sentences(s.text, s.start) for s in spans]
    flat = [sent.text for sents in split for sent in sents]
    scores = await scorer(query, flat)
    out, k = [], 0
    for span, sents in zip(spans, split, strict=True):
        mine = scores[k : k + len(sents)]
        k += len(sents)
        if len(sents) < 2:
            out.append(span)
            continue
        texts = [s.text for s in sents]
        lexical = bm25(query, texts)
        if opts.sentence_margin is not None:
            keep = mine >= float(mine.max()) - opts.sentence_margin
        else:
            keep = nucleus(relevance(mine, lexical, opts.lexical_weight), opts.sentence_mass, SENTENCE_TEMPERATURE)
        keep |= lexical >= max(float(lexical.max()) * 0.5, 1e-9)
        keep[int(np.argmax(mine))] = True
        out.append(Span(" ".join(t for t, kept in zip(texts, keep, strict=True) if kept), span.start, span.end))
    return out


def heading_paths(text: str, spans: list[Span]) -> list[str]:
    """Each span's Markdown heading path ("Stores > Qdrant Edge"), "" before the first heading (one pass)."""
    heads = [(m.start(), len(m.group(1)), m.group(2).strip()) for m in HEADING.finditer(text)]
    out: list[str] = []
    stack: list[tuple[int, str]] = []
    k = 0
    for span in spans:  # spans are in text order
        while k < len(heads) and heads[k][0] <= span.start:
            _, level, name = heads[k]
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, name))
            k += 1
        out.append(" > ".join(name for _, name in stack))
    return out


async def filter_context(
    query: str,
    passages: list[str] | None,
    text: str | None,
    backend: ModelBackend,
    embed_model: str,
    opts: FilterOptions,
    max_passages: int | None = None,
) -> FilterResult:
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
    where = "passages.{i}" if text is None else "text, passage {i}"  # errors name what the caller sent
    scorer = Scorer(backend.naming(where), embed_model, opts.rerank_model)
    tokens = [count_tokens(s.text) for s in spans]
    paths = heading_paths(text, spans) if text is not None else [""] * len(spans)
    scores = await scorer(query, [f"{h}\n\n{s.text}" if h else s.text for h, s in zip(paths, spans, strict=True)])
    rel = relevance(scores, bm25(query, [s.text for s in spans]), opts.lexical_weight)
    keep = select(scores, tokens, opts, rel)
    kept = [spans[i] for i in keep]
    if opts.sentences and kept:
        kept = await prune_sentences(scorer, query, kept, opts)
    out: list[KeptPassage] = []
    for i, span in zip(keep, kept, strict=True):
        entry: KeptPassage = {
            "index": i,
            "score": round(float(scores[i]), 6),
            "tokens": count_tokens(span.text),
            "text": span.text,
        }
        if text is not None:
            entry["start"], entry["end"] = span.start, span.end
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
