"""What a handler asks of a packed batch (`OutputSpec`) and what the model gives back (`Readout`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt
from torch import Tensor

Sparse = tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]  # (vocabulary ids ascending, weights)
V = TypeVar("V")
OutputKind = Literal["dense", "multivector", "sparse", "score", "logits"]


@dataclass(frozen=True)
class OutputSpec:
    """The outputs a handler wants of every sequence: pooled rows (dense), token vectors (multivector),
    vocabulary weights (sparse), relevance (score), every label's logit (logits)."""

    kinds: frozenset[OutputKind]

    @classmethod
    def of(cls, *kinds: OutputKind) -> OutputSpec:
        return cls(frozenset(kinds))

    def __contains__(self, kind: object) -> bool:
        return kind in self.kinds


@dataclass
class Readout:
    """One value per sequence, in the sequences' order, for each output the spec named (the others empty);
    rows are float32 on the CPU, not yet normalised (engine.model.heads.sentence_vectors does that)."""

    dense: list[Tensor] = field(default_factory=list)  # [hidden] each
    multivector: list[Tensor] = field(default_factory=list)  # [n_tokens, dim] each
    sparse: list[Sparse] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    logits: list[Tensor] = field(default_factory=list)  # [labels] each
    tokens: int = 0  # real tokens the forward passes read

    def part(self, rows: slice) -> Readout:
        """The rows of one task (a contiguous run of its sequences)."""
        return Readout(self.dense[rows], self.multivector[rows], self.sparse[rows], self.score[rows], self.logits[rows])

    def split(self, sizes: Sequence[int]) -> list[Readout]:
        """One readout per task, the i-th of `sizes[i]` consecutive sequences."""
        parts, start = [], 0
        for n in sizes:
            parts.append(self.part(slice(start, start + n)))
            start += n
        return parts

    @staticmethod
    def gather(parts: Sequence[Readout], order: Sequence[int]) -> Readout:
        """The batches' readouts (in run order, their sequences at positions `order`) back in input order."""
        where = sorted(range(len(order)), key=order.__getitem__)  # input position -> run position
        return Readout(
            _in_order([v for p in parts for v in p.dense], where),
            _in_order([v for p in parts for v in p.multivector], where),
            _in_order([v for p in parts for v in p.sparse], where),
            _in_order([v for p in parts for v in p.score], where),
            _in_order([v for p in parts for v in p.logits], where),
            sum(p.tokens for p in parts),
        )


def _in_order(values: list[V], where: list[int]) -> list[V]:
    return [values[k] for k in where] if values else []
