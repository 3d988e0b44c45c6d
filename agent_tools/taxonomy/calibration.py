"""Confidence as a probability: softmax temperatures measured on held-out evidence, and the calibration error.

Zero-shot, the temperature of the leaf softmax is measured on the taxonomy itself (`taxonomy_temperature`):
each reference leaf's bare name is a pseudo-query, once with its own leaf present (it should land there) and
once with its own leaf left out (it should land under its parent, as a text that fits only a broader node
does). A fit measures its own scale on the held-out folds of its labelled texts (agent_tools/taxonomy/fit.py).
No constant here was chosen on a labelled set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

REFERENCE_LEAVES = 256  # leaves whose names are the taxonomy's pseudo-queries (constant work per taxonomy)
IN_SCOPE_LOSS = 0.03  # share of in-scope pseudo-queries the general topics may take (the target we hold to)
TEMPERATURES = (0.002, 0.5, 60)  # geometric grid (low, high, points) searched for the cosine temperature


@dataclass(frozen=True)
class Calibration:
    """The cosine softmax temperature and where it came from."""

    temperature: float = 0.05
    none_bias: float = 0.0  # taken off the "fits nothing" logit of the general topics
    source: str = "unmeasured"


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax; -inf entries stay -inf."""
    import numpy as np

    top = logits.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    shifted = logits - top
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def subtree_nll(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean negative log of the softmax mass on each row's target columns (targets: boolean, same shape)."""
    import numpy as np

    logp = log_softmax(logits)
    masked = np.where(targets, logp, -np.inf)
    top = masked.max(axis=1, keepdims=True)
    mass = top[:, 0] + np.log(np.exp(masked - top).sum(axis=1))
    return float(-np.mean(np.maximum(mass, -50.0)))


def best_scale(logits: np.ndarray, targets: np.ndarray, grid: np.ndarray) -> float:
    """The multiplier of the logits with the least `subtree_nll` on the grid."""
    losses = [subtree_nll(logits * s, targets) for s in grid.tolist()]
    return float(grid[int(min(range(len(losses)), key=losses.__getitem__))])


def taxonomy_temperature(
    sims: np.ndarray, own: np.ndarray, parent_leaves: list[np.ndarray], is_top: np.ndarray
) -> float:
    """The cosine temperature measured on pseudo-queries. sims: (queries, leaves) cosines of each reference
    leaf's name with every leaf; own: each query's leaf column; parent_leaves: the leaf columns under each
    query's parent; is_top: the query's leaf sits directly under the root (no broader node to land on)."""
    import numpy as np

    n = sims.shape[0]
    rows = np.arange(n)
    present = np.zeros_like(sims, dtype=bool)
    present[rows, own] = True
    logits, targets = [sims], [present]
    keep = np.flatnonzero(~is_top)
    if keep.size:
        absent = sims[keep].copy()
        absent[np.arange(keep.size), own[keep]] = -np.inf
        under = np.zeros_like(absent, dtype=bool)
        for k, q in enumerate(keep.tolist()):
            under[k, parent_leaves[q]] = True
        under[np.arange(keep.size), own[keep]] = False
        ok = under.any(axis=1)
        logits.append(absent[ok])
        targets.append(under[ok])
    low, high, points = TEMPERATURES
    grid = 1 / np.geomspace(high, low, points)
    return 1 / best_scale(np.concatenate(logits), np.concatenate(targets), grid)


def none_bias(sims: np.ndarray, own: np.ndarray, outside: np.ndarray, temperature: float) -> float:
    """The bias of the general topics' "fits nothing" logit: the pseudo-queries are in scope, so with their own
    leaf left out (an in-scope text that fits no leaf exactly) at most IN_SCOPE_LOSS of them may go to a
    general topic rather than to a leaf. outside: (queries,) each pseudo-query's best general-topic cosine."""
    import numpy as np

    if sims.shape[1] < 2 or outside.size == 0:
        return 0.0
    others = sims.copy()
    others[np.arange(own.size), own] = -np.inf
    margin = (outside - others.max(axis=1)) / temperature
    return max(0.0, float(np.quantile(margin, 1 - IN_SCOPE_LOSS)))


def expected_calibration_error(confidence: np.ndarray, right: np.ndarray, bins: int = 10) -> float:
    """ECE: the gap between confidence and accuracy, averaged over equal-width bins weighted by their size."""
    import numpy as np

    if confidence.size == 0:
        return 0.0
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        sel = which == b
        if sel.any():
            total += sel.mean() * abs(float(confidence[sel].mean()) - float(right[sel].mean()))
    return total
