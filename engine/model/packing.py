"""Forming batches: sort by length, then cut into runs that fit a token budget and an item cap."""

from __future__ import annotations


def pack_by_budget(lengths: list[int], max_tokens: int, max_items: int) -> list[list[int]]:
    """Indices of `lengths` grouped into batches, shortest first; each batch's tokens <= max_tokens.

    A single sequence longer than the budget gets a batch of its own (callers keep max_seq_len below the
    budget, which card validation enforces, so this only matters for hand-built budgets).
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for i in order:
        if current and (tokens + lengths[i] > max_tokens or len(current) >= max_items):
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += lengths[i]
    if current:
        batches.append(current)
    return batches
