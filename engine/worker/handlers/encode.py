"""The encode handler: tokenise every request, share packed batches, shape each request's outputs."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from engine.arch.layers import PackedBatch
from engine.metrics import timed
from engine.model.packed import PackedModel
from engine.model.sequences import Encoded
from engine.queue.protocol import Result
from engine.tasks.task import EncodeParams, Task
from engine.worker import outputs
from engine.worker.batching import BatchHook, BatchLimits, run_packed
from engine.worker.handlers.base import TaskHandler, params_of, usage


class EncodeHandler(TaskHandler[PackedModel, list[Encoded]]):
    """Dense vectors, token vectors (multivector) and sparse weights, from one forward pass per batch."""

    kind = "encode"
    model_type = PackedModel

    def prepare(self, model: PackedModel, task: Task) -> list[Encoded]:
        """The task's texts with their prefix, tokenised under its truncation policy, tagged with its adapter."""
        p = params_of(task, EncodeParams)
        texts = [p.prefix + item.text for item in task.items] if p.prefix else [item.text for item in task.items]
        encoded = model.encode_texts(texts, truncate=p.truncate, is_query=p.is_query)
        if p.adapter:
            model.use_adapter(p.adapter)  # loaded and checked now: a bad adapter fails only this task
            for e in encoded:
                e.lora = p.adapter
        return encoded

    @torch.inference_mode()
    def run(
        self, model: PackedModel, work: list[tuple[Task, list[Encoded]]], limits: BatchLimits, on_batch: BatchHook
    ) -> list[Result]:
        seqs = [e for _, encoded in work for e in encoded]
        kinds = {k for task, _ in work for k in params_of(task, EncodeParams).output_types}

        def read(hidden: Tensor, batch: PackedBatch, group: list[Encoded]) -> dict[str, list[Any]]:
            rows: dict[str, list[Any]] = {}
            if "dense" in kinds:
                rows["dense"] = list(model.heads.pooled(hidden, batch))
            if "multivector" in kinds:
                rows["multivector"] = model.heads.token_vectors(hidden, batch, group)
            if "sparse" in kinds:
                rows["sparse"] = model.heads.sparse(hidden, batch)
            return rows

        produced = run_packed(model, seqs, limits, read, on_batch)
        results, start = [], 0
        with timed("postprocess"):
            for task, encoded in work:
                mine = slice(start, start + len(encoded))
                start += len(encoded)
                results.append(self._shape(model, task, {k: v[mine] for k, v in produced.items()}, encoded))
        return results

    @staticmethod
    def _shape(model: PackedModel, task: Task, values: dict[str, list[Any]], encoded: list[Encoded]) -> Result:
        p = params_of(task, EncodeParams)
        items: list[dict[str, Any]] = [{"id": it.id} if it.id is not None else {} for it in task.items]
        for kind in p.output_types:
            if kind == "dense":
                shaped = outputs.dense(p, torch.stack(values[kind]))
            elif kind == "multivector":
                shaped = outputs.multivector(p, values[kind])
            else:
                shaped = outputs.sparse(values[kind], model.vocab_size)
            for entry, value in zip(items, shaped, strict=True):
                entry[kind] = value
        return {"items": items, "usage": usage(sum(len(e.ids) for e in encoded))}
