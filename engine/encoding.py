"""The encode task on a worker: tokenise every request, share packed batches, shape each request's output."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from engine.arch.pooling import l2_normalize
from engine.batching import pack_by_budget
from engine.errors import ShoalError
from engine.postprocess import quantize, truncate_dims
from engine.queue import Task
from engine.runner import LoadedModel

BatchHook = Callable[[str, int, int], None]  # (model, items, tokens) of each forward batch


def task_texts(model: LoadedModel, task: Task) -> list[str]:
    """The texts as the model sees them: a request instruction, else the card's query/document prefix."""
    params = task.params
    options = params.get("options") or {}
    prefix = params.get("instruction")
    if prefix is None:
        card = model.card
        prefix = card.query_instruction if options.get("is_query") else card.document_instruction
    texts = [item["text"] for item in task.items]
    return [prefix + t for t in texts] if prefix else texts


def _shape_dense(model: LoadedModel, task: Task, pooled: torch.Tensor) -> list[dict[str, Any]]:
    """Normalise, Matryoshka-truncate and quantise one request's rows into wire items."""
    params = task.params
    options = params.get("options") or {}
    normalize = options.get("normalize")
    normalize = model.card.normalize if normalize is None else normalize
    x = truncate_dims(pooled, options.get("dimensions"), pooled.shape[1])  # [n, dims]
    if normalize:
        x = l2_normalize(x)
    dtype = params.get("output_dtype", "float32")
    values = quantize(x.numpy(), dtype)
    out = []
    for item, row in zip(task.items, values, strict=True):
        entry: dict[str, Any] = {"dense": {"dims": int(x.shape[1]), "dtype": dtype, "values": row}}
        if item.get("id") is not None:
            entry = {"id": item["id"], **entry}
        out.append(entry)
    return out


def run_encode(
    model: LoadedModel,
    tasks: list[Task],
    max_tokens: int,
    max_items: int,
    on_batch: BatchHook | None = None,
) -> list[dict[str, Any] | ShoalError]:
    """Results (or the error) of each task, in order; tasks share forward batches."""
    started = time.perf_counter()
    outcomes: list[dict[str, Any] | ShoalError] = [{} for _ in tasks]
    seqs: list[list[int]] = []
    owners: list[tuple[int, int]] = []  # (task index, item index) of each sequence
    for t, task in enumerate(tasks):
        truncate = (task.params.get("options") or {}).get("truncate")
        truncate = model.card.truncate if truncate is None else truncate
        try:
            ids = model.tokenizer(task_texts(model, task), truncate=truncate)
        except ShoalError as e:
            outcomes[t] = e
            continue
        seqs.extend(ids)
        owners.extend((t, i) for i in range(len(ids)))
    tokenized = time.perf_counter()

    pooled: list[torch.Tensor | None] = [None] * len(seqs)
    for batch in pack_by_budget([len(s) for s in seqs], max_tokens, max_items):
        rows = model.embed([seqs[i] for i in batch])  # [b, hidden]
        if on_batch is not None:
            on_batch(model.card.id, len(batch), sum(len(seqs[i]) for i in batch))
        for row, i in zip(rows, batch, strict=True):
            pooled[i] = row
    inferred = time.perf_counter()

    per_task: dict[int, list[torch.Tensor]] = {}
    task_tokens = [0] * len(tasks)
    for (t, _), row, seq in zip(owners, pooled, seqs, strict=True):
        per_task.setdefault(t, []).append(row)
        task_tokens[t] += len(seq)
    timing = {
        "tokenization_ms": (tokenized - started) * 1000,
        "inference_ms": (inferred - tokenized) * 1000,
    }
    for t, rows in per_task.items():
        items = _shape_dense(model, tasks[t], torch.stack(rows))
        outcomes[t] = {"items": items, "timing": dict(timing), "usage": {"input_tokens": task_tokens[t]}}
    return outcomes
