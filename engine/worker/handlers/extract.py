"""The extract handler: GLiNER entities, or zero-shot classes by NLI or embedding similarity.

The mode was resolved from the card at the edge (ExtractParams.mode). Entities run on a GlinerModel (the
`gliner` package's runtime); classes run on one of our packed backbones. Every task's work shares batches
with the others': one model call per batch, never one per item or per request.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.errors import InvalidInput
from engine.model.gliner_runtime import GlinerModel
from engine.model.loaded import LoadedModel
from engine.model.packed import PackedModel
from engine.tasks.results import Entity, ExtractedItem, ExtractReply
from engine.tasks.task import ExtractParams, Task
from engine.worker.batching import BatchHook, BatchLimits
from engine.worker.extraction import classes, entities
from engine.worker.handlers.base import TaskHandler, params_of, usage

Prepared = entities.TaskWindows | classes.Prepared
Found = list[list[Entity]] | Tensor  # what running gives one task: entities per item, or [items, labels] scores


def _packed(model: LoadedModel, mode: str) -> PackedModel:
    if not isinstance(model, PackedModel):
        raise InvalidInput(f"model {model.card.id!r} is a GLiNER model; it extracts entities, not {mode} classes")
    if mode == "nli" and (model.card.extract is None or model.card.extract.kind != "nli"):
        raise InvalidInput(f"model {model.card.id!r} is not an NLI cross-encoder")
    return model


class ExtractHandler(TaskHandler[GlinerModel | PackedModel, Prepared, Found, ExtractReply]):
    """Entities ({text, label, score, start, end}) or classifications ({label, score}) of each item."""

    kind = "extract"
    model_type = (GlinerModel, PackedModel)

    def __init__(self, label_cache: int = classes.LABEL_CACHE_SIZE) -> None:
        self.labels = classes.LabelVectors(label_cache)

    def prepare(self, model: GlinerModel | PackedModel, task: Task) -> Prepared:
        p = params_of(task, ExtractParams)
        if p.mode == "entities":
            return entities.prepare_entities(entities.check_model(model), task, p)
        packed = _packed(model, p.mode)
        if p.mode == "nli":
            return classes.prepare_nli(packed, task, p)
        return classes.prepare_embedding(packed, task, p)

    @torch.inference_mode()
    def run(
        self,
        model: GlinerModel | PackedModel,
        work: list[tuple[Task, Prepared]],
        limits: BatchLimits,
        on_batch: BatchHook,
    ) -> list[Found]:
        """Each task's entities per item, or its [items, labels] scores; every mode's tasks share batches."""
        found: dict[int, Found] = {}
        by_mode: dict[str, list[int]] = {}
        for i, (task, _) in enumerate(work):
            by_mode.setdefault(params_of(task, ExtractParams).mode, []).append(i)
        for mode, idx in by_mode.items():
            if mode == "entities":
                windows = [w for i in idx if isinstance(w := work[i][1], entities.TaskWindows)]
                ents = entities.run_entities(entities.check_model(model), windows, limits, on_batch)
                found.update(zip(idx, ents, strict=True))
                continue
            mine = [(work[i][0], p) for i in idx if isinstance(p := work[i][1], classes.Prepared)]
            packed = _packed(model, mode)
            if mode == "nli":
                scores = classes.run_nli(packed, mine, limits, on_batch)
            else:
                scores = classes.run_embedding(packed, mine, limits, on_batch, self.labels)
            found.update(zip(idx, scores, strict=True))
        return [found[i] for i in range(len(work))]

    def finish(self, model: GlinerModel | PackedModel, task: Task, prepared: Prepared, out: Found) -> ExtractReply:
        """The wire items: the entities found in each item, or its labels best first."""
        if isinstance(prepared, entities.TaskWindows) and isinstance(out, list):
            return {"items": entities.result_items(task, out), "usage": usage(entities.usage_tokens(prepared))}
        assert isinstance(prepared, classes.Prepared) and isinstance(out, Tensor)  # run gave classes their scores
        p = params_of(task, ExtractParams)
        items: list[ExtractedItem] = [
            {"id": item.id if item.id is not None else f"item-{i}", "entities": [], "classifications": c, "data": {}}
            for i, (item, c) in enumerate(zip(task.items, classes.classifications(out, p), strict=True))
        ]
        return {"items": items, "usage": usage(sum(len(s.ids) for s in prepared.seqs))}
