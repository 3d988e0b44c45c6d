"""Enrichment fan-out: each configured step is a task sent through the shoal client API, many in flight.

A window of chunks comes back as `Enriched`: its dense vectors as one float32 [n, dims] matrix (stacked once
from the SDK's per-item rows), token vectors and sparse vectors as flat arrays, labels per chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from connectors.chunks import F32, SparseVectors, TokenVectors
from engine.client.calls import EncodeResult, ExtractResult, Item
from engine.client.protocol import ShoalClient
from engine.tasks.results import JSONValue
from pipeline.chunking import Chunk
from pipeline.config import ConfigError, PipelineConfig, Step

NEEDS = {  # step kind -> (engine task, output the model must list)
    "dense": ("encode", "dense"),
    "multivector": ("encode", "multivector"),
    "sparse": ("encode", "sparse"),
    "entities": ("extract", "entities"),
    "classify": ("extract", "classifications"),
}
ModelInfo = dict[str, JSONValue]  # one model as the engine lists it (GET /v1/models)


@dataclass
class Enriched:
    """What the steps made of a window of chunks, in chunk order: arrays for vectors, lists for labels."""

    vectors: F32  # [n, dims]
    multivectors: TokenVectors | None = None
    sparse: SparseVectors | None = None
    entities: list[dict[str, list[str]]] | None = None  # label -> distinct texts, per chunk
    classes: list[list[str]] | None = None


class Enricher:
    """Wraps any shoal client (Engine, Client, their async cores): validates steps, enriches chunks."""

    def __init__(self, client: ShoalClient, cfg: PipelineConfig) -> None:
        self.client = client.aio  # awaited here whichever client it is (a blocking one runs on its own loop)
        self.cfg = cfg
        self.infos: dict[str, ModelInfo] = {}
        self._slots = asyncio.Semaphore(cfg.engine.in_flight)

    async def validate(self) -> dict[str, ModelInfo]:
        """Check every step's model can do its task and output, before any file is read."""
        listed = await self._listed()
        for step in self.cfg.steps:
            task, output = NEEDS[step.kind]
            info = listed.get(step.model)
            if info is None:  # a local folder: probe it, then take the listing it now has (same info every run)
                info = await self._probe(step)
                info = (await self._listed()).get(step.model, info)
            if info.get("available") is False:
                raise ConfigError(
                    f"step {step.kind!r}: model {step.model!r} has no weights here and cannot download them",
                    code="MODEL_UNAVAILABLE",
                )
            if task not in _names(info.get("tasks")):
                raise ConfigError(
                    f"step {step.kind!r}: model {step.model!r} cannot run {task!r} tasks "
                    f"(it supports {info.get('tasks')})"
                )
            if output and output not in _names(info.get("outputs")):
                raise ConfigError(
                    f"step {step.kind!r}: model {step.model!r} cannot produce {output!r} output "
                    f"(it produces {info.get('outputs')})"
                )
            self.infos[step.model] = info
        return self.infos

    async def _listed(self) -> dict[str, ModelInfo]:
        return {str(m["name"]): m for m in await self.client.models()}

    async def _probe(self, step: Step) -> ModelInfo:
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
        asked = step.options.get("dimensions")  # Matryoshka truncation, when the step asks for it
        return int(asked) if isinstance(asked, int | float | str) and asked else _dims(self.infos[step.model])["dense"]

    def multivector_dim(self) -> int | None:
        step = self.cfg.step("multivector")
        return _dims(self.infos[step.model]).get("multivector", 0) or None if step else None

    async def enrich(self, chunks: list[Chunk]) -> Enriched:
        """The columns the steps produce for these chunks: vectors, multivectors, sparse, entities, classes."""
        size = self.cfg.engine.batch_size
        jobs = [(step, i) for step in self.cfg.steps for i in range(0, len(chunks), size)]
        parts = await asyncio.gather(*(self._batch(step, chunks[i : i + size]) for step, i in jobs))
        encoded: dict[str, list[EncodeResult]] = {}
        extracted: dict[str, list[ExtractResult]] = {}
        for (step, _), (enc, ext) in zip(jobs, parts, strict=True):
            encoded.setdefault(step.kind, []).extend(enc)
            extracted.setdefault(step.kind, []).extend(ext)
        return columns(self.cfg.steps, encoded, extracted)

    async def _batch(self, step: Step, chunks: list[Chunk]) -> tuple[list[EncodeResult], list[ExtractResult]]:
        async with self._slots:
            if step.kind in ("entities", "classify"):
                items: list[Item] = [{"id": c.id, "text": c.text} for c in chunks]
                options = dict(step.options) | ({} if step.threshold is None else {"threshold": step.threshold})
                found = await self.client.extract(step.model, items, labels=step.labels, options=options or None)
                return [], found
            items = [{"id": c.id, "text": c.embed_text} for c in chunks]
            vectors = await self.client.encode(
                step.model, items, output_types=[step.kind], options=step.options or None
            )
            return vectors, []


def columns(
    steps: Sequence[Step], encoded: dict[str, list[EncodeResult]], extracted: dict[str, list[ExtractResult]]
) -> Enriched:
    """Each step's results (in chunk order) as the window's columns; the dense rows stacked into one matrix."""
    dense = encoded["dense"]
    out = Enriched(np.stack([np.asarray(r["dense"], dtype=np.float32) for r in dense]))
    for step in steps:
        if step.kind == "multivector":
            out.multivectors = TokenVectors.stack([r["multivector"] for r in encoded["multivector"]])
        elif step.kind == "sparse":
            out.sparse = SparseVectors.stack([(r["sparse"]["indices"], r["sparse"]["values"]) for r in encoded["sparse"]])  # fmt: skip
        elif step.kind == "entities":
            out.entities = [entity_map(r, step.threshold or 0.0) for r in extracted["entities"]]
        elif step.kind == "classify":
            out.classes = [class_labels(r, step) for r in extracted["classify"]]
    return out


def entity_map(r: ExtractResult, keep: float) -> dict[str, list[str]]:
    """The distinct texts found per label, scores under `keep` left out."""
    ents: dict[str, list[str]] = {}
    for e in r.get("entities", []):
        if e.get("score", 1.0) >= keep and e["text"] not in ents.setdefault(e["label"], []):
            ents[e["label"]].append(e["text"])
    return ents


def entity_tags(ents: dict[str, list[str]]) -> list[str]:
    """`label:text` for every entity found, what entity filters match."""
    return sorted(f"{k}:{t}" for k, v in ents.items() for t in v)


def class_labels(r: ExtractResult, step: Step) -> list[str]:
    """The classes kept: every one at or over the threshold (multi-label), else the best."""
    found = [c for c in r.get("classifications", []) if c.get("score", 1.0) >= (step.threshold or 0.0)]  # best first
    if not step.options.get("multi_label"):  # single-label: the best class (every label comes back, ranked)
        found = found[:1]
    return [c["label"] for c in found]


def _names(value: JSONValue) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _dims(info: ModelInfo) -> dict[str, int]:
    dims = info.get("dims")
    return {k: int(v) for k, v in dims.items() if isinstance(v, int | float)} if isinstance(dims, dict) else {}
