"""Running sequences through a packed model in batches under a token budget and an item cap."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.model.packed import PackedModel
from engine.model.packing import pack_by_budget
from engine.model.readout import OutputSpec, Readout
from engine.model.sequences import Encoded

BatchHook = Callable[[int, int], None]  # (items, tokens) of each forward batch


@dataclass(frozen=True)
class BatchLimits:
    """How big one forward batch may get."""

    max_tokens: int
    max_items: int


def run_packed(
    model: PackedModel, seqs: list[Encoded], limits: BatchLimits, spec: OutputSpec, on_batch: BatchHook | None = None
) -> Readout:
    """The outputs `spec` names of every sequence, in `seqs` order: shortest first in packed batches, the
    model asked once per batch (forward and heads together)."""
    parts: list[Readout] = []
    order: list[int] = []
    for batch in pack_by_budget([len(s.ids) for s in seqs], limits.max_tokens, limits.max_items):
        part = model.read([seqs[i] for i in batch], spec)
        parts.append(part)
        order.extend(batch)
        if on_batch is not None:
            on_batch(len(batch), part.tokens)
    return Readout.gather(parts, order)
