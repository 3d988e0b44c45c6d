"""The one scorer: every leaf's logit for a batch of texts, and the answer decided from them.

Zero-shot, a leaf's logit is its cosine with the text divided by the taxonomy's measured temperature
(agent_tools/taxonomy/calibration.py), so the best leaf is exactly the flat nearest leaf. A fitted index
adds a logistic-regression head over the labelled leaves (agent_tools/taxonomy/fit.py): its logits plus
`prior` times the zero-shot ones, leaves without labelled texts at the zero-shot logit plus `unseen`, all
times the fitted `scale`. The general topics outside the taxonomy (agent_tools/taxonomy/outside.py, less a
bias measured on the taxonomy), or a fit's `""` class, give the "fits nothing" logit beside the leaves.

The answer is a node on the best leaf's path, or `""`: by default the one with the highest expected
hierarchical F1 under the softmax of these logits (so the tree steps up only where the probability says
the broader node is worth more than the leaf), or with `threshold`, the deepest node whose subtree holds
that much probability.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_tools.results import leaf_out, node_out

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.results import Classified, LeafScore, NodeScore
    from agent_tools.taxonomy.index import TaxonomyIndex
    from agent_tools.taxonomy.options import ClassifyOptions

NEVER = -1e30  # the logit of an option that cannot win (kept finite so softmaxes stay defined)


def cosines(vectors: np.ndarray, queries: list[np.ndarray]) -> np.ndarray:
    """(texts, rows) cosines. A query is one unit vector (dim,) or a text and its sentences (1 + s, dim),
    scored as the mean of the whole text's cosine and the best sentence's."""
    import numpy as np

    if all(q.ndim == 1 for q in queries):
        return np.stack(queries) @ vectors.T
    rows = []
    for q in queries:
        if q.ndim == 1:
            rows.append(vectors @ q)
        else:
            sims = vectors @ q.T  # (rows, 1 + sentences)
            rows.append((sims[:, 0] + sims[:, 1:].max(axis=1)) / 2)
    return np.stack(rows)


def mix(zero: np.ndarray, learned: np.ndarray, columns: np.ndarray, prior: float, unseen: float) -> np.ndarray:
    """Leaf logits of a head: prior * zero-shot everywhere, plus the learned logits on their leaf columns,
    plus `unseen` on the leaves without a class. zero: (n, leaves); learned: (n, len(columns))."""
    out = prior * zero + unseen
    out[:, columns] = prior * zero[:, columns] + learned
    return out


def whole(queries: list[np.ndarray]) -> np.ndarray:
    """(texts, dim): each query's whole-text vector."""
    import numpy as np

    return np.stack([q if q.ndim == 1 else q[0] for q in queries])


def logits(
    index: TaxonomyIndex, queries: list[np.ndarray], off_topic: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(node cosines (n, nodes), leaf logits (n, leaves), "fits nothing" logits (n,)) for a batch."""
    import numpy as np

    sims = cosines(index.vectors, queries)
    zero = sims[:, index.leaves] / index.calibration.temperature
    texts = whole(queries)
    none = np.full(len(queries), NEVER)
    if off_topic and index.outside is not None and len(index.outside):
        none = (texts @ index.outside.T).max(axis=1) / index.calibration.temperature - index.calibration.none_bias
    head = index.head
    if head is None:
        return sims, zero, none
    learned = texts @ head.coef.T + head.intercept
    seen = head.classes > 0
    columns = np.searchsorted(index.leaves, head.classes[seen])
    leaf_logits = mix(zero, learned[:, seen], columns, head.prior, head.unseen) * head.scale
    if (~seen).any():  # the fit's own "" class
        none = learned[:, int(np.flatnonzero(~seen)[0])] * head.scale
    else:  # the general topics, as a leaf without labelled texts
        none = np.where((none > NEVER / 2) & (head.prior > 0), head.prior * none * head.scale, NEVER)
    return sims, leaf_logits, none


def softmax(row: np.ndarray) -> np.ndarray:
    import numpy as np

    e = np.exp(row - row.max())
    return e / e.sum()


def expected_f1(index: TaxonomyIndex, p: np.ndarray, path: list[int]) -> np.ndarray:
    """E[hierarchical F1] of answering each node of `path` (top first) when the true leaf is drawn from p."""
    import numpy as np

    leaves = index.leaves
    shared = np.zeros(leaves.size)  # how many nodes of `path` each leaf has above or at it
    for node in path:
        lo, hi = np.searchsorted(leaves, [node, node + int(index.size[node])])
        shared[lo:hi] += 1
    depth = index.depth[leaves]
    out = np.empty(len(path))
    for i in range(len(path)):
        out[i] = float(p @ (2 * np.minimum(shared, i + 1) / (i + 1 + depth)))
    return out


def decide(
    index: TaxonomyIndex,
    sims: np.ndarray,
    leaf_logits: np.ndarray,
    none: float,
    opts: ClassifyOptions,
    outside_name: str | None = None,
) -> Classified:
    """The answer for one text from its node cosines, leaf logits and "fits nothing" logit."""
    import numpy as np

    t, leaves = index.taxonomy, index.leaves
    p_all = softmax(np.append(leaf_logits, none))
    p, p_none = p_all[:-1], float(p_all[-1])
    order = np.argsort(-leaf_logits, kind="stable")
    best = int(leaves[order[0]])
    path = t.path(best)
    cumulative = np.concatenate(([0.0], np.cumsum(p)))

    def mass(node: int) -> float:
        lo, hi = np.searchsorted(leaves, [node, node + int(index.size[node])])
        return float(cumulative[hi] - cumulative[lo])

    masses = [mass(n) for n in path]
    if opts.threshold is None:
        gains = [p_none, *expected_f1(index, p, path).tolist()]
        depth = max(i for i, g in enumerate(gains) if g >= max(gains) - 1e-12)
    elif opts.threshold == 0:
        depth = len(path)
    else:
        depth = 0
        while depth < len(path) and masses[depth] >= opts.threshold:
            depth += 1
    chosen = path[depth - 1] if depth else 0
    levels: list[NodeScore] = [node_out(t, n, float(sims[n]), c) for n, c in zip(path, masses, strict=True)]
    alternatives: list[LeafScore] = [
        leaf_out(t, int(leaves[k]), float(sims[leaves[k]]), float(p[k]), float(leaf_logits[k]))
        for k in order[1 : 1 + opts.alternatives].tolist()
    ]
    off = outside_name if (chosen == 0 and none > float(leaf_logits[order[0]])) else None
    return {
        "label": t.labels[chosen],
        "id": t.ids[chosen] if chosen else None,
        "path": [t.names[n] for n in t.path(chosen)],
        "is_leaf": bool(chosen and not t.children[chosen]),
        "confidence": round(masses[depth - 1], 6) if chosen else None,
        "levels": levels,
        "best_leaf": leaf_out(t, best, float(sims[best]), masses[-1], float(leaf_logits[order[0]])),
        "alternatives": alternatives,
        "off_topic": off,
    }


def answer_batch(index: TaxonomyIndex, queries: list[np.ndarray], opts: ClassifyOptions) -> list[Classified]:
    """Score a batch and decide each text (no model calls: queries are embedded already)."""
    import numpy as np

    sims, leaf_logits, none = logits(index, queries, opts.off_topic)
    names: list[str | None] = [None] * len(queries)
    if index.outside is not None and len(index.outside):
        nearest = (whole(queries) @ index.outside.T).argmax(axis=1)
        names = [index.outside_names[int(k)] for k in nearest]
    if opts.threshold == 0:
        none = np.full_like(none, NEVER)
    return [decide(index, sims[i], leaf_logits[i], float(none[i]), opts, names[i]) for i in range(len(queries))]
