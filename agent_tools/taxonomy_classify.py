"""Classify a batch of texts into a taxonomy: the query vectors, then the beam (agent_tools/taxonomy.py) or
the flat strategy for each text.

A query is the text's embedding, or with `sentences` a matrix: the whole text's embedding on row 0 and one
row per sentence when the text has more than one, so a long message is also scored by its best sentence
(agent_tools/taxonomy.py `similarities`). Every text and sentence of a batch is encoded in one call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agent_tools.taxonomy import (
    ClassifyOptions,
    _answer,
    closest_outside,
    decide,
    run_beam,
    run_beam_reranked,
    similarities,
)
from agent_tools.taxonomy_calibration import spread
from agent_tools.taxonomy_index import IndexCache, TaxonomyIndex
from agent_tools.text import split_sentences

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend
    from agent_tools.results import Classified
    from agent_tools.taxonomy_tree import Taxonomy

FLAT_CHUNK = 64  # texts scored against every node at once by the flat strategy


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
    if opts.strategy == "flat":
        return await flat(index, texts, queries, opts, backend)
    if not opts.rerank_model:
        return await asyncio.to_thread(_beam_batch, index, queries, opts)
    slots = asyncio.Semaphore(8)

    async def one(text: str, query: np.ndarray) -> Classified:
        async with slots:
            search = await run_beam_reranked(index, query, text, opts, backend)
        return _answer(search)

    return list(await asyncio.gather(*(one(t, q) for t, q in zip(texts, queries, strict=True))))


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


def _beam_batch(index: TaxonomyIndex, queries: list[np.ndarray], opts: ClassifyOptions) -> list[Classified]:
    return [_answer(run_beam(index, q, opts)) for q in queries]


def flat_scores(index: TaxonomyIndex, sims: np.ndarray, weight: float) -> tuple[np.ndarray, np.ndarray]:
    """(leaf similarity, leaf path score) for every leaf and every text from the (texts, nodes) similarities:
    the tree without pruning."""
    import numpy as np

    acc = np.zeros_like(sims)
    inner = ~index.is_leaf
    inner[0] = False
    for d in range(1, int(index.depth.max()) + 1):
        nodes = np.flatnonzero(inner & (index.depth == d))
        acc[:, nodes] = acc[:, index.parent[nodes]] + sims[:, nodes]
    leaves = index.leaves
    return sims[:, leaves], sims[:, leaves] + weight * acc[:, index.parent[leaves]]


def node_similarities(index: TaxonomyIndex, queries: list[np.ndarray]) -> np.ndarray:
    """(texts, nodes): one matrix product when every query is one vector, else text by text."""
    import numpy as np

    if all(q.ndim == 1 for q in queries):
        return np.stack(queries) @ index.vectors.T
    every = np.arange(len(index.vectors))
    return np.stack([similarities(index.vectors, every, q) for q in queries])


async def flat(
    index: TaxonomyIndex, texts: list[str], queries: list[np.ndarray], opts: ClassifyOptions, backend: ModelBackend
) -> list[Classified]:
    """Every leaf scored (by similarity, or by the cross-encoder when one is given): the unpruned baseline."""
    import numpy as np

    leaves = index.leaves
    queries = [index.in_space(q) for q in queries]
    out = []
    for k, text in enumerate(texts):
        if k % FLAT_CHUNK == 0:  # (texts x nodes) matrices, a chunk of texts at a time
            matrix = await asyncio.to_thread(node_similarities, index, queries[k : k + FLAT_CHUNK])
            sims, path_scores = await asyncio.to_thread(flat_scores, index, matrix, opts.ancestor_weight)
        leaf_scores = sims[k % FLAT_CHUNK].astype(np.float64)
        paths = path_scores[k % FLAT_CHUNK].astype(np.float64)
        if opts.rerank_model:
            t = index.taxonomy
            leaf_scores = (await backend.score(opts.rerank_model, text, [t.node_text(int(i)) for i in leaves])).astype(
                np.float64
            )
            paths = leaf_scores
        node_score = _LazyScores(index, queries[k], leaves, leaf_scores)
        stats = spread(similarities(index.vectors, index.reference, queries[k]))
        outside = closest_outside(index, queries[k], opts)
        out.append(decide(index, leaves, leaf_scores, paths, node_score, opts, stats, outside))
    return out


class _LazyScores(Mapping[int, float]):
    """Per-level scores for the flat answer: a leaf's own score, an internal node's prototype similarity."""

    def __init__(self, index: TaxonomyIndex, query: np.ndarray, leaves: np.ndarray, scores: np.ndarray) -> None:
        self.index, self.query = index, query
        self.leaf_score = dict(zip(leaves.tolist(), scores.tolist(), strict=True))

    def __getitem__(self, node: int) -> float:
        import numpy as np

        if node in self.leaf_score:
            return self.leaf_score[node]
        return float(similarities(self.index.vectors, np.array([node]), self.query)[0])

    def __iter__(self) -> Iterator[int]:
        return iter(self.leaf_score)

    def __len__(self) -> int:
        return len(self.leaf_score)
