"""Running sequences through a packed model in batches under a token budget and an item cap."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.model.packed import PackedModel
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
    """The outputs `spec` names of every sequence, in `seqs` order, under this worker's batch limits: one call
    into the model, which packs, reads each batch and gathers (PackedModel.read_all); then `on_batch(items,
    tokens)` for each batch it ran, here on the worker's side."""
    read, sizes = model.read_all(seqs, spec, limits.max_tokens, limits.max_items)
    if on_batch is not None:
        for items, tokens in sizes:
            on_batch(items, tokens)
    return read
