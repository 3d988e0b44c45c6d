"""A fitted index's learned head: the logistic regression over the labelled leaves and how it mixes in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Head:
    """A fitted logistic-regression head and how it mixes with the zero-shot logits."""

    coef: np.ndarray  # (classes, dim)
    intercept: np.ndarray  # (classes,)
    classes: np.ndarray  # the node of each class; 0: fits nothing
    prior: float  # weight of the zero-shot logits
    unseen: float  # added to the zero-shot logit of a leaf without labelled texts
    scale: float  # every logit times this (the calibration)
