"""Classify a batch of texts into a taxonomy: the query vectors, then the scorer and its decision.

A query is the text's embedding, or with `sentences` a matrix: the whole text's embedding on row 0 and one
row per sentence when the text has more than one, so a long message is also scored by its best sentence
(agent_tools/taxonomy/scorer.py `cosines`). Every text and sentence of a batch is encoded in one call. With
`rerank_model`, the best `rerank_top` leaves of each text are rescored by a cross-encoder (the engine's
`score` task) and the answer is decided over them alone.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from agent_tools.taxonomy.index import IndexCache, TaxonomyIndex
from agent_tools.taxonomy.scorer import NEVER, answer_batch, decide, logits
from agent_tools.text import split_sentences

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend
    from agent_tools.results import Classified
    from agent_tools.taxonomy.options import ClassifyOptions
    from agent_tools.taxonomy.tree import Taxonomy

CHUNK = 256  # texts scored against every leaf at once (a (texts, nodes) matrix at a time)
RERANK_TEMPERATURE = 0.1  # softmax temperature of cross-encoder probabilities


async def classify(
    texts: list[str],
    taxonomy: Taxonomy,
    backend: ModelBackend,
    model: str,
    opts: ClassifyOptions,
    cache: IndexCache,
    fitted: Path | None = None,
) -> list[Classified]:
    """Classify a batch: one encode call for all texts; the node vectors come from the cache (or from a
    fitted index file)."""
    index = await cache.get(taxonomy, backend, model, fitted)
    return await classify_index(texts, index, backend, model, opts)


async def classify_index(
    texts: list[str], index: TaxonomyIndex, backend: ModelBackend, model: str, opts: ClassifyOptions
) -> list[Classified]:
    """Classify a batch against a built index."""
    queries = await query_vectors(texts, backend, model, opts.sentences)
    if opts.rerank_model:
        return await reranked(index, texts, queries, opts, backend)
    return await asyncio.to_thread(answer_chunks, index, queries, opts)


def answer_chunks(index: TaxonomyIndex, queries: list[np.ndarray], opts: ClassifyOptions) -> list[Classified]:
    out: list[Classified] = []
    for k in range(0, len(queries), CHUNK):
        out += answer_batch(index, queries[k : k + CHUNK], opts)
    return out


async def query_vectors(texts: list[str], backend: ModelBackend, model: str, sentences: bool) -> list[np.ndarray]:
    """Per text: its embedding (dim,), or with `sentences` and more than one sentence (1 + sentences, dim)."""
    parts = [[s.text for s in split_sentences(t)] if sentences else [] for t in texts]
    parts = [p if len(p) > 1 else [] for p in parts]
    embedded = await backend.embed(model, texts + [s for p in parts for s in p], is_query=True)
    out: list[np.ndarray] = []
    at = len(texts)
    for k, p in enumerate(parts):
        if p:
            out.append(embedded[[k, *range(at, at + len(p))]])
            at += len(p)
        else:
            out.append(embedded[k])
    return out


async def reranked(
    index: TaxonomyIndex, texts: list[str], queries: list[np.ndarray], opts: ClassifyOptions, backend: ModelBackend
) -> list[Classified]:
    """The best `rerank_top` leaves of each text rescored by the cross-encoder; the others cannot win."""
    import numpy as np

    t = index.taxonomy
    sims, leaf_logits, _ = await asyncio.to_thread(logits, index, queries, False)
    slots = asyncio.Semaphore(8)

    async def one(i: int) -> Classified:
        top = np.argsort(-leaf_logits[i], kind="stable")[: opts.rerank_top]
        async with slots:
            scores = await backend.score(
                opts.rerank_model or "", texts[i], [t.node_text(int(index.leaves[k])) for k in top]
            )
        row = np.full(index.leaves.size, NEVER)
        row[top] = np.asarray(scores, dtype=np.float64) / RERANK_TEMPERATURE
        return decide(index, sims[i], row, NEVER, opts)

    return list(await asyncio.gather(*(one(i) for i in range(len(texts)))))
