"""Classify texts into a hierarchical taxonomy: top-down beam search over cached node embeddings.

At each level the children of the beam are scored by cosine similarity with the text (an internal child
by the better of its prototype and its best child: a one-level look-ahead); the best `beam_width` internal
nodes go on, leaves met on the way are kept. A leaf's path score is its similarity plus `ancestor_weight`
times the similarities of the nodes above it, so the hierarchy decides between look-alike leaves
("Dogs > Food" vs "Cats > Food"). With `rerank_model`, each level's shortlist is rescored by a
cross-encoder (the engine's `score` task) before the beam is chosen.

Confidence is a calibrated probability that a node is right (agent_tools/taxonomy_calibration.py): the
subtree's mass under a softmax over the leaf scores found, next to a "none of these" option, both scaled by
the text's own score distribution over a fixed sample of reference leaves, then mapped by a logistic fitted
on labelled texts (the default on one set; `shoal taxonomy fit` per taxonomy). The answer is the deepest
node on the best path whose confidence reaches `threshold` (0 always returns a leaf), with the score and
confidence of every level and the runner-up leaves. With a reranker, or with `temperature` or `none_score`
given, the confidence is the plain subtree mass at those absolute levels. The batch entry points and the
flat strategy (every leaf scored the same way, without pruning) are in agent_tools/taxonomy_classify.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from agent_tools.results import leaf_out, node_out
from agent_tools.taxonomy_calibration import probability, spread
from agent_tools.taxonomy_index import TaxonomyIndex

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend
    from agent_tools.results import Classified, LeafScore, NodeScore

EMBED_DEFAULTS = (0.03, 0.3)  # (temperature, none_score) when only one of them is given, for cosines
RERANK_DEFAULTS = (0.1, 0.5)  # the same for cross-encoder probabilities
DEFAULT_THRESHOLD = 0.1  # the highest keeping top-1 leaf at flat's on bench/data/taxonomy/support (chosen there only)
Outside = tuple[float, str | None]  # (similarity, name) of the closest general topic outside the taxonomy


class ClassifyOptions(BaseModel):
    """How to search the tree."""

    strategy: Literal["beam", "flat"] = Field("beam", description="beam: top-down beam search; flat: every leaf")
    beam_width: int = Field(5, ge=1, le=100, description="internal nodes kept at each level")
    threshold: float = Field(
        DEFAULT_THRESHOLD, ge=0, le=1, description="confidence needed to go one level deeper; 0 always returns a leaf"
    )
    alternatives: int = Field(3, ge=0, le=50, description="runner-up leaves to return")
    ancestor_weight: float = Field(0.1, ge=0, le=10, description="weight of the ancestors' scores in a path score")
    rerank_model: str | None = Field(None, description="cross-encoder that rescores each level's shortlist")
    rerank_top: int = Field(10, ge=1, le=1000, description="candidates per level rescored by rerank_model")
    temperature: float | None = Field(
        None,
        gt=0,
        le=10,
        description="absolute softmax temperature of the confidence (default: calibrated to each text's scores; "
        "0.1 with a reranker)",
    )
    sentences: bool = Field(
        False, description="also score a text of several sentences by its best sentence (mean of the two scores)"
    )
    off_topic: bool = Field(
        True,
        description='answer "" when a text is closer to a general topic outside the taxonomy (weather, recipes, '
        "sports, ...) than to every leaf; embeddings only, and not with threshold 0",
    )
    none_score: float | None = Field(
        None,
        allow_inf_nan=False,
        description="absolute score of the 'none of these' option (default: calibrated to each text's scores; "
        "0.5 with a reranker)",
    )


@dataclass
class Level:
    """One level's candidates: node ids, ranking scores (with the look-ahead), plain similarities (what a
    path score adds up), and which beam entry each came from."""

    nodes: np.ndarray
    scores: np.ndarray
    plain: np.ndarray
    owner: np.ndarray


@dataclass
class Search:
    """The state of one text's beam search."""

    index: TaxonomyIndex
    query: np.ndarray
    opts: ClassifyOptions
    beam: np.ndarray
    acc: np.ndarray  # per beam entry: sum of the scores of the internal nodes on its path
    stats: tuple[float, float] = (0.0, 1.0)  # (mu, sigma) of the text's similarities to the reference leaves
    outside: Outside = (float("-inf"), None)  # the closest general topic outside the taxonomy
    scored: dict[int, float] = field(default_factory=dict)
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)  # leaves, scores, path scores
    dot_products: int = 0  # node vectors compared with the text (the search's work; flat compares them all)

    def expand(self) -> Level | None:
        """Children of the beam scored by embedding similarity (internal ones with the look-ahead)."""
        import numpy as np

        if self.beam.size == 0:
            return None
        ix = self.index
        kids, owner = children_of(ix, self.beam)
        plain = similarities(ix.vectors, kids, self.query)
        self.dot_products += kids.size
        scores = plain.copy()
        inner = ~ix.is_leaf[kids]
        if inner.any():
            grand, gowner = children_of(ix, kids[inner])
            starts = np.flatnonzero(np.r_[True, gowner[1:] != gowner[:-1]])  # owners come in runs
            best = np.maximum.reduceat(similarities(ix.vectors, grand, self.query), starts)
            self.dot_products += grand.size
            scores[inner] = np.maximum(scores[inner], best)
        return Level(kids, scores, plain, owner)

    def shortlist(self, level: Level, size: int) -> Level:
        import numpy as np

        keep = np.argsort(-level.scores, kind="stable")[:size]
        return Level(level.nodes[keep], level.scores[keep], level.plain[keep], level.owner[keep])

    def advance(self, level: Level) -> None:
        """Record the leaves met, keep the best `beam_width` internal nodes."""
        import numpy as np

        ix, w = self.index, self.opts.ancestor_weight
        leaf = ix.is_leaf[level.nodes]
        if leaf.any():
            owners = level.owner[leaf]
            self.found.append((level.nodes[leaf], level.plain[leaf], level.plain[leaf] + w * self.acc[owners]))
        inner = np.flatnonzero(~leaf)
        top = inner[np.argsort(-level.scores[inner], kind="stable")[: self.opts.beam_width]]
        self.scored.update(zip(level.nodes[top].tolist(), level.plain[top].tolist(), strict=True))
        self.acc = self.acc[level.owner[top]] + level.plain[top]
        self.beam = level.nodes[top]


def similarities(vectors: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine similarity of some unit rows with the query: one vector (dim,), or a text and its sentences
    (1 + sentences, dim), scored as the mean of the whole text's similarity and the best sentence's. einsum,
    not `@`: for one text a threaded BLAS matrix-vector product costs a fixed ~10 ms of thread start-up on a
    busy CPU, more than the sums."""
    import numpy as np

    if query.ndim == 1:
        return np.einsum("ij,j->i", vectors[rows], query)
    sims = np.einsum("ij,kj->ik", vectors[rows], query)  # (rows, 1 + sentences)
    return (sims[:, 0] + sims[:, 1:].max(axis=1)) / 2


def children_of(ix: TaxonomyIndex, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All children of `nodes` (CSR gather) and, for each, the position of its parent in `nodes`."""
    import numpy as np

    starts, stops = ix.child_ptr[nodes], ix.child_ptr[nodes + 1]
    lengths = stops - starts
    owner = np.repeat(np.arange(nodes.size), lengths)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return ix.child_idx[starts[owner] + np.arange(lengths.sum()) - offsets[owner]], owner


def new_search(index: TaxonomyIndex, query: np.ndarray, opts: ClassifyOptions) -> Search:
    """A search at the root, with the text's score distribution over the reference leaves."""
    import numpy as np

    query = index.in_space(query)
    search = Search(index, query, opts, np.array([0]), np.zeros(1, dtype=np.float32))
    search.stats = spread(similarities(index.vectors, index.reference, query))
    search.dot_products += index.reference.size
    search.outside = closest_outside(index, query, opts)
    return search


def closest_outside(index: TaxonomyIndex, query: np.ndarray, opts: ClassifyOptions) -> Outside:
    """(similarity, name) of the general topic closest to the text; -inf when off-topic answers are off."""
    import numpy as np

    off = not opts.off_topic or opts.threshold == 0 or opts.rerank_model  # threshold 0: always a leaf
    if off or index.outside is None or not len(index.outside):
        return float("-inf"), None
    sims = similarities(index.outside, np.arange(len(index.outside)), query)
    k = int(sims.argmax())
    return float(sims[k]), index.outside_names[k]


def run_beam(index: TaxonomyIndex, query: np.ndarray, opts: ClassifyOptions) -> Search:
    """Embedding-only beam search for one text (no model calls: the node vectors are cached)."""
    search = new_search(index, query, opts)
    while (level := search.expand()) is not None:
        search.advance(level)
    return search


async def run_beam_reranked(
    index: TaxonomyIndex, query: np.ndarray, text: str, opts: ClassifyOptions, backend: ModelBackend
) -> Search:
    """Beam search where each level's shortlist is rescored by a cross-encoder."""
    t = index.taxonomy
    search = new_search(index, query, opts)
    while (level := search.expand()) is not None:
        level = search.shortlist(level, opts.rerank_top)
        texts = [t.node_text(int(i)) for i in level.nodes]
        level.scores = level.plain = await backend.score(opts.rerank_model or "", text, texts)
        search.advance(level)
    return search


def decide(
    index: TaxonomyIndex,
    leaves: np.ndarray,
    scores: np.ndarray,
    path_scores: np.ndarray,
    node_score: Mapping[int, float],
    opts: ClassifyOptions,
    stats: tuple[float, float],
    outside: Outside = (float("-inf"), None),
) -> Classified:
    """The answer for one text from its candidate leaves: best path, per-level confidence, alternatives."""
    import numpy as np

    t = index.taxonomy
    order = np.argsort(-path_scores, kind="stable")
    best = int(leaves[order[0]])
    relative = not (opts.rerank_model or opts.temperature or opts.none_score is not None)
    cal, (mu, sigma) = index.calibration, stats
    if relative:
        temperature, none_score = cal.k * sigma, mu + cal.m * sigma
    else:
        temperature, none_score = calibration(opts)
    d = (float(scores[order[0]]) - index.level) / sigma
    top = max(float(scores.max()), none_score)
    weights = np.exp((scores - top) / temperature)
    total = float(weights.sum() + np.exp((none_score - top) / temperature))
    by_position = np.argsort(leaves, kind="stable")
    positions = leaves[by_position]
    cumulative = np.concatenate(([0.0], np.cumsum(weights[by_position])))

    def mass(node: int) -> float:
        """The share of the softmax in node's subtree (a preorder interval of the leaves)."""
        lo, hi = np.searchsorted(positions, [node, node + t.size[node]])
        return float(cumulative[hi] - cumulative[lo]) / total

    def confidence(share: float) -> float:
        return probability(share, d, cal) if relative else share

    levels: list[NodeScore] = []
    chosen, chosen_confidence = 0, 0.0
    off_topic = outside[0] > float(scores[order[0]])
    for node in t.path(best):
        c = confidence(mass(node))
        levels.append(node_out(t, node, node_score.get(node), c))
        if chosen == t.parent[node] and c >= opts.threshold and not off_topic:
            chosen, chosen_confidence = node, c
    alternatives: list[LeafScore] = []
    for k in order[1 : 1 + opts.alternatives]:
        share = float(weights[k]) / total
        alternatives.append(leaf_out(t, int(leaves[k]), float(scores[k]), confidence(share), path_scores[k]))
    return {
        "label": t.labels[chosen],
        "id": t.ids[chosen] if chosen else None,
        "path": [t.names[n] for n in t.path(chosen)],
        "is_leaf": bool(chosen and not t.children[chosen]),
        "confidence": round(chosen_confidence, 6) if chosen else None,
        "levels": levels,
        "best_leaf": leaf_out(t, best, float(scores[order[0]]), confidence(mass(best)), path_scores[order[0]]),
        "alternatives": alternatives,
        "off_topic": outside[1] if off_topic else None,
    }


def calibration(opts: ClassifyOptions) -> tuple[float, float]:
    """(temperature, none_score): given ones, else the defaults for cosine or cross-encoder scores."""
    temperature, none_score = RERANK_DEFAULTS if opts.rerank_model else EMBED_DEFAULTS
    return opts.temperature or temperature, none_score if opts.none_score is None else opts.none_score


def _answer(search: Search) -> Classified:
    import numpy as np

    leaves, scores, paths = (np.concatenate(part) for part in zip(*search.found, strict=True))
    node_scores = search.scored | dict(zip(leaves.tolist(), scores.tolist(), strict=True))
    return decide(
        search.index,
        leaves,
        scores.astype(np.float64),
        paths.astype(np.float64),
        node_scores,
        search.opts,
        search.stats,
        search.outside,
    )
