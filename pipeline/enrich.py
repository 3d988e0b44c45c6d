"""Enrichment fan-out: each configured step is a task sent through the shoal client API, many in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from engine.client.calls import Item
from engine.client.protocol import ShoalClient
from pipeline.chunking import Chunk
from pipeline.config import ConfigError, PipelineConfig, Step

NEEDS = {  # step kind -> (engine task, output the model must list)
    "dense": ("encode", "dense"),
    "multivector": ("encode", "multivector"),
    "sparse": ("encode", "sparse"),
    "entities": ("extract", "entities"),
    "classify": ("extract", "classifications"),
}


class Enricher:
    """Wraps any shoal client (Engine, Client, their async cores): validates steps, enriches chunks."""

    def __init__(self, client: ShoalClient, cfg: PipelineConfig) -> None:
        self.client = client.aio  # awaited here whichever client it is (a blocking one runs on its own loop)
        self.cfg = cfg
        self.infos: dict[str, dict[str, Any]] = {}
        self._slots = asyncio.Semaphore(cfg.engine.in_flight)

    async def validate(self) -> dict[str, dict[str, Any]]:
        """Check every step's model can do its task and output, before any file is read."""
        listed = {m["name"]: m for m in await self.client.models()}
        for step in self.cfg.steps:
            task, output = NEEDS[step.kind]
            info = listed.get(step.model)
            if info is None:  # a local folder: probe it, then take the listing it now has (same info every run)
                info = await self._probe(step)
                listed = {m["name"]: m for m in await self.client.models()}
                info = listed.get(step.model, info)
            if info.get("available") is False:
                raise ConfigError(
                    f"step {step.kind!r}: model {step.model!r} has no weights here and cannot download them",
                    code="MODEL_UNAVAILABLE",
                )
            if task not in info.get("tasks", []):
                raise ConfigError(
                    f"step {step.kind!r}: model {step.model!r} cannot run {task!r} tasks "
                    f"(it supports {info.get('tasks')})"
                )
            if output and output not in info.get("outputs", []):
                raise ConfigError(
                    f"step {step.kind!r}: model {step.model!r} cannot produce {output!r} output "
                    f"(it produces {info.get('outputs')})"
                )
            self.infos[step.model] = info
        return self.infos

    async def _probe(self, step: Step) -> dict[str, Any]:
        """A model the catalogue does not list (a local checkpoint folder): ask it once for a tiny result."""
        from engine.errors import ShoalError

        try:
            if NEEDS[step.kind][0] == "extract":
                x = await self.client.extract(step.model, "probe", labels=step.labels[:1])
                produced = "classifications" if x.get("classifications") else "entities"
                return {"name": step.model, "tasks": ["extract"], "outputs": [produced], "dims": {}}
            r = await self.client.encode(step.model, "probe", output_types=["dense"])
        except ShoalError as e:
            raise ConfigError(f"step {step.kind!r}: model {step.model!r}: {e.code}: {e.message}") from e
        dense = np.asarray(r["dense"])
        return {"name": step.model, "tasks": ["encode"], "outputs": ["dense"], "dims": {"dense": dense.shape[-1]}}

    def dense_dim(self) -> int:
        step = self.cfg.dense
        return int(step.options.get("dimensions") or self.infos[step.model]["dims"]["dense"])

    def multivector_dim(self) -> int | None:
        step = self.cfg.step("multivector")
        return int(self.infos[step.model]["dims"].get("multivector", 0)) or None if step else None

    async def enrich(self, chunks: list[Chunk]) -> list[dict[str, Any]]:
        """Per chunk the columns its steps produce: vector, multivector, sparse, entities, classes."""
        out: list[dict[str, Any]] = [{} for _ in chunks]
        size = self.cfg.engine.batch_size
        jobs = [
            self._batch(step, chunks[i : i + size], out[i : i + size])
            for step in self.cfg.steps
            for i in range(0, len(chunks), size)
        ]
        await asyncio.gather(*jobs)
        return out

    async def _batch(self, step: Step, chunks: list[Chunk], out: list[dict[str, Any]]) -> None:
        async with self._slots:
            if step.kind in ("entities", "classify"):
                items: list[Item] = [{"id": c.id, "text": c.text} for c in chunks]
                options = dict(step.options) | ({} if step.threshold is None else {"threshold": step.threshold})
                results = await self.client.extract(step.model, items, labels=step.labels, options=options or None)
            else:
                items = [{"id": c.id, "text": c.embed_text} for c in chunks]
                results = await self.client.encode(
                    step.model, items, output_types=[step.kind], options=step.options or None
                )
        for r, o in zip(results, out, strict=True):
            o.update(step_columns(step, r))


def step_columns(step: Step, r: dict[str, Any]) -> dict[str, Any]:
    """Map one result of a step to the store's columns."""
    if step.kind == "dense":
        return {"vector": np.asarray(r["dense"], dtype=np.float32)}
    if step.kind == "multivector":
        return {"multivector": np.asarray(r["multivector"], dtype=np.float32)}
    if step.kind == "sparse":
        sp = r["sparse"]
        return {"sparse": {"indices": [int(i) for i in sp["indices"]], "values": [float(v) for v in sp["values"]]}}
    keep = step.threshold or 0.0
    if step.kind == "entities":
        ents: dict[str, list[str]] = {}
        for e in r.get("entities", []):
            if e.get("score", 1.0) >= keep and e["text"] not in ents.setdefault(e["label"], []):
                ents[e["label"]].append(e["text"])
        return {"entities": ents, "entity_tags": sorted(f"{k}:{t}" for k, v in ents.items() for t in v)}
    found = [c for c in r.get("classifications", []) if c.get("score", 1.0) >= keep]  # best first
    if not step.options.get("multi_label"):  # single-label: the best class (every label comes back, ranked)
        found = found[:1]
    return {"classes": [c["label"] for c in found]}
