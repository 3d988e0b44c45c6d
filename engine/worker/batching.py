"""Running sequences through a packed model in batches under a token budget and an item cap."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from engine.arch.layers import PackedBatch
from engine.metrics import timed
from engine.model.packed import PackedModel
from engine.model.packing import pack_by_budget
from engine.model.sequences import Encoded

BatchHook = Callable[[int, int], None]  # (items, tokens) of each forward batch
Reader = Callable[[Tensor, PackedBatch, list[Encoded]], dict[str, list[Any]]]  # one batch -> values per output


@dataclass(frozen=True)
class BatchLimits:
    """How big one forward batch may get."""

    max_tokens: int
    max_items: int


def run_packed(
    model: PackedModel, seqs: list[Encoded], limits: BatchLimits, read: Reader, on_batch: BatchHook | None = None
) -> dict[str, list[Any]]:
    """Forward `seqs` shortest first in packed batches; `read` turns each batch's hidden states into one value
    per sequence for each output it names. Returns those values in `seqs` order, per output."""
    produced: dict[str, list[Any]] = {}
    for batch in pack_by_budget([len(s.ids) for s in seqs], limits.max_tokens, limits.max_items):
        group = [seqs[i] for i in batch]
        hidden, packed = model.forward(group)  # [T, hidden]
        with timed("postprocess"):
            values_by_output = read(hidden, packed, group)
        for name, values in values_by_output.items():
            out = produced.setdefault(name, [None] * len(seqs))
            for i, value in zip(batch, values, strict=True):
                out[i] = value
        if on_batch is not None:
            on_batch(len(batch), packed.num_tokens)
    return produced
