"""Confidence of a taxonomy answer as a calibrated probability, relative to each text's own score distribution.

Cosine levels differ between taxonomies and text styles (a listing sits close to its leaf, a chatty message
far from every one-line description), so no absolute score means "confident" everywhere. Each text is
therefore compared with a fixed sample of reference leaves (at most REFERENCE_LEAVES, the same for beam and
flat): with their mean `mu` and spread `sigma`, the subtree masses come from a softmax at temperature
`k * sigma` next to a "none of these" option scored `mu + m * sigma`. The taxonomy brings its own level,
measured when its index is built: how close a leaf's bare name comes to the best *other* leaf (the
`level` of an in-domain text that matches nothing exactly). The confidence that a node is right (the true
node or one of its ancestors) is a logistic function of the node's mass and of `d = (best - level) / sigma`,
how far the best leaf stands above that level in units of the text's own spread.

The default coefficients were fitted on one labelled set (bench/data/taxonomy/support: support tickets) and
are reported on three others; `shoal taxonomy fit` refits them per taxonomy from its labelled texts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

REFERENCE_LEAVES = 256  # leaves every text is compared with for its score distribution (constant work)


@dataclass(frozen=True)
class Calibration:
    """Scale-free constants: temperature and "none" offset in units of the text's score spread, and the
    logistic weights of (logit of the node's mass, d of the best leaf, intercept)."""

    k: float = 0.5
    m: float = 2.5
    w_mass: float = 0.846
    w_d: float = 0.469
    bias: float = 0.094
    source: str = "default (fitted on bench/data/taxonomy/support)"

    def as_list(self) -> list[float]:
        return [self.k, self.m, self.w_mass, self.w_d, self.bias]

    @classmethod
    def from_list(cls, values: list[float], source: str) -> Calibration:
        k, m, w_mass, w_d, bias = (float(v) for v in values)
        return cls(k, m, w_mass, w_d, bias, source)


DEFAULT = Calibration()


def spread(reference_scores: np.ndarray) -> tuple[float, float]:
    """(mu, sigma) of a text's similarities to the reference leaves; sigma never 0."""
    return float(reference_scores.mean()), max(float(reference_scores.std()), 1e-6)


def probability(mass: float, d: float, cal: Calibration) -> float:
    """Calibrated P(node is right) from its subtree mass and the best leaf's standing `d`."""
    import math

    m = min(max(mass, 1e-6), 1 - 1e-6)
    x = cal.w_mass * math.log(m / (1 - m)) + cal.w_d * d + cal.bias
    return 1 / (1 + math.exp(-x)) if x > -700 else 0.0


def features(mass: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Design matrix of the logistic: logit(mass), d, 1."""
    import numpy as np

    m = np.clip(mass, 1e-6, 1 - 1e-6)
    return np.stack([np.log(m / (1 - m)), d, np.ones_like(m)], axis=1)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Newton's method on an L2-regularised logistic loss (three weights: converges in a few steps). The mass
    weight is kept positive, so a node's confidence never exceeds its parent's."""
    import numpy as np

    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-np.clip(x @ w, -50, 50)))
        grad = x.T @ (p - y) / len(y) + l2 * w
        hess = (x.T * (p * (1 - p))) @ x / len(y) + l2 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    w[0] = max(w[0], 0.05)
    return w


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
