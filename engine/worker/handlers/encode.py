"""The encode handler: tokenise every request, share packed batches, shape each request's outputs."""

from __future__ import annotations

import torch

from engine.metrics import timed
from engine.model.packed import PackedModel
from engine.model.readout import OutputSpec, Readout
from engine.model.sequences import Encoded
from engine.tasks.results import EncodedItem, EncodeReply
from engine.tasks.task import EncodeParams, Task
from engine.worker import outputs
from engine.worker.batching import BatchHook, BatchLimits, run_packed
from engine.worker.handlers.base import TaskHandler, params_of, usage


class EncodeHandler(TaskHandler[PackedModel, list[Encoded], Readout, EncodeReply]):
    """Dense vectors, token vectors (multivector) and sparse weights, from one model call per batch."""

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
    ) -> list[Readout]:
        """Every task's rows of the outputs any task asked for, from shared batches."""
        spec = OutputSpec(frozenset(k for task, _ in work for k in params_of(task, EncodeParams).output_types))
        read = run_packed(model, [e for _, encoded in work for e in encoded], limits, spec, on_batch)
        return read.split([len(encoded) for _, encoded in work])

    @torch.inference_mode()
    def finish(self, model: PackedModel, task: Task, prepared: list[Encoded], out: Readout) -> EncodeReply:
        """The outputs the task asked for, truncated, normalised and quantised as it asked."""
        p = params_of(task, EncodeParams)
        items: list[EncodedItem] = [{"id": it.id} if it.id is not None else {} for it in task.items]
        with timed("postprocess"):
            for kind in p.output_types:
                if kind == "dense":
                    for entry, dense in zip(items, outputs.dense(p, torch.stack(out.dense)), strict=True):
                        entry["dense"] = dense
                elif kind == "multivector":
                    for entry, multi in zip(items, outputs.multivector(p, out.multivector), strict=True):
                        entry["multivector"] = multi
                else:
                    for entry, sparse in zip(items, outputs.sparse(out.sparse, model.vocab_size), strict=True):
                        entry["sparse"] = sparse
        return {"items": items, "usage": usage(sum(len(e.ids) for e in prepared))}
