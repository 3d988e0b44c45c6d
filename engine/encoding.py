"""The encode task on a worker: tokenise every request, share packed batches, shape each request's output."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from engine import outputs
from engine.arch.pooling import l2_normalize
from engine.batching import pack_by_budget
from engine.errors import ShoalError
from engine.lora import task_adapter
from engine.outputs import Sparse
from engine.postprocess import quantize, truncate_dims
from engine.queue import Task
from engine.runner import Encoded, LoadedModel

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


def _shape_multivector(model: LoadedModel, task: Task, rows: list[torch.Tensor]) -> list[dict[str, Any]]:
    dtype = task.params.get("output_dtype", "float32")
    return [
        {
            "token_dims": int(r.shape[1]),
            "num_tokens": int(r.shape[0]),
            "dtype": dtype,
            "values": quantize(r.numpy(), dtype),
        }
        for r in rows
    ]


def _shape_sparse(model: LoadedModel, rows: list[Sparse]) -> list[dict[str, Any]]:
    dims = int(model.backbone.config.vocab_size)
    return [{"dims": dims, "dtype": "float32", "indices": ids, "values": vals} for ids, vals in rows]


def encode_task_inputs(model: LoadedModel, task: Task) -> list[Encoded]:
    """Tokenise one encode task: instruction prefix, truncation policy, query/document markers."""
    options = task.params.get("options") or {}
    truncate = options.get("truncate")
    truncate = model.card.truncate if truncate is None else truncate
    encoded = model.encode_texts(task_texts(model, task), truncate=truncate, is_query=bool(options.get("is_query")))
    adapter = task_adapter(model, task.params)  # loaded and checked here: a bad adapter fails only its task
    for e in encoded:
        e.lora = adapter
    return encoded


@torch.inference_mode()
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
    seqs: list[Encoded] = []
    owners: list[int] = []  # task index of each sequence
    kinds: set[str] = set()
    for t, task in enumerate(tasks):
        try:
            encoded = encode_task_inputs(model, task)
        except ShoalError as e:
            outcomes[t] = e
            continue
        seqs.extend(encoded)
        owners.extend([t] * len(encoded))
        kinds.update(task.params.get("output_types") or ["dense"])
    tokenized = time.perf_counter()

    produced: dict[str, list[Any]] = {k: [None] * len(seqs) for k in kinds}
    for batch in pack_by_budget([len(s.ids) for s in seqs], max_tokens, max_items):
        group = [seqs[i] for i in batch]
        hidden, packed = model.forward(group)  # [T, hidden]
        rows: dict[str, list[Any]] = {}
        if "dense" in kinds:
            rows["dense"] = list(outputs.dense(model, hidden, packed))
        if "multivector" in kinds:
            rows["multivector"] = outputs.multivector(model, hidden, packed, group)
        if "sparse" in kinds:
            rows["sparse"] = outputs.sparse(model, hidden, packed, group)
        if on_batch is not None:
            on_batch(model.card.id, len(batch), packed.num_tokens)
        for kind, values in rows.items():
            for i, value in zip(batch, values, strict=True):
                produced[kind][i] = value
    inferred = time.perf_counter()

    timing = {
        "tokenization_ms": (tokenized - started) * 1000,
        "inference_ms": (inferred - tokenized) * 1000,
    }
    by_task: dict[int, list[int]] = {}
    for i, t in enumerate(owners):
        by_task.setdefault(t, []).append(i)
    for t, mine in by_task.items():
        task = tasks[t]
        items: list[dict[str, Any]] = [{"id": it["id"]} if it.get("id") is not None else {} for it in task.items]
        for kind in task.params.get("output_types") or ["dense"]:
            values = [produced[kind][i] for i in mine]
            if kind == "dense":
                shaped = [e["dense"] for e in _shape_dense(model, task, torch.stack(values))]
            elif kind == "multivector":
                shaped = _shape_multivector(model, task, values)
            else:
                shaped = _shape_sparse(model, values)
            for entry, value in zip(items, shaped, strict=True):
                entry[kind] = value
        tokens = sum(len(seqs[i].ids) for i in mine)
        outcomes[t] = {"items": items, "timing": dict(timing), "usage": {"input_tokens": tokens}}
    return outcomes
