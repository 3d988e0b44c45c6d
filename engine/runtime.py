"""AsyncEngine: catalogue + queue + worker in one process; the gateway and the SDK's Engine sit on it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from engine.aio import cancel_and_wait
from engine.cards import Catalogue, ModelCard, check_task
from engine.config import EngineSettings
from engine.errors import DeadlineExceeded, InvalidInput, PayloadTooLarge
from engine.metrics import QUEUE_DEPTH
from engine.queue import InProcessQueue, Task, WorkQueue
from engine.registry import ModelRegistry
from engine.results import ModelCalls
from engine.schemas import parse_encode, parse_score
from engine.worker import Worker

log = logging.getLogger("shoal.engine")


def estimate_tokens(text: str) -> int:
    """A cheap upper-ish guess of token count without tokenising (about 4 characters a token)."""
    return len(text) // 4 + 2


class AsyncEngine(ModelCalls):
    """Annotates requests, enqueues them and (embedded mode) runs the worker that serves them."""

    def __init__(
        self, settings: EngineSettings | None = None, *, queue: WorkQueue | None = None, worker: bool = True
    ) -> None:
        self.settings = settings or EngineSettings()
        self.catalogue = Catalogue(self.settings.model_dir)
        self.queue: WorkQueue | None = queue
        self.registry = ModelRegistry(
            self.catalogue, self.settings.device, self.settings.offline, settings=self.settings
        )
        self.worker: Worker | None = None
        self._run_worker = worker
        self._tasks: list[asyncio.Task[None]] = []
        self.ready = False
        self.draining = False

    async def start(self) -> AsyncEngine:
        if self.ready:
            return self
        if self.settings.threads:
            import torch

            torch.set_num_threads(self.settings.threads)
        if self.queue is None and self.settings.queue_url:
            from engine.nats_queue import NatsQueue  # distributed mode: nats-py is only needed here

            self.queue = await NatsQueue.connect(self.settings, gateway=True, worker=self._run_worker)
        if self.queue is None:
            self.queue = InProcessQueue()
        if self._run_worker:
            self.worker = Worker(self.queue, self.registry, self.settings)
            self._tasks.append(asyncio.create_task(self.worker.run(), name="shoal-worker"))
            for model in [*self.settings.preload, *self.registry.pinned_models()]:
                await self.registry.get(model)
        self.ready = True
        return self

    async def close(self) -> None:
        self.draining, self.ready = True, False
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        await self.registry.aclose()
        if self.queue is not None:
            await self.queue.close()

    async def __aenter__(self) -> AsyncEngine:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- gateway side ------------------------------------------------------------------------------

    def card(self, model: str) -> ModelCard:
        return self.catalogue.get(model)

    def _check_limits(self, n_items: int, texts: list[tuple[str, str]]) -> None:
        """413 for too many items or an over-long text (where, text), before anything is queued."""
        s = self.settings
        if n_items > s.max_items:
            raise PayloadTooLarge(f"{n_items} items is over the limit of {s.max_items} per request")
        for where, text in texts:
            if len(text) > s.max_item_chars:
                raise PayloadTooLarge(f"{where}: {len(text)} characters is over {s.max_item_chars}")

    def annotate_encode(self, model: str, body: Any, tenant: str | None = None) -> Task:
        """Validate an encode body cheaply (no tokenising) and wrap it as a queue task."""
        card = self.card(model)
        check_task(card, "encode")
        req = parse_encode(body)
        s = self.settings
        self._check_limits(len(req.items), [(f"items.{i}", it.text) for i, it in enumerate(req.items)])
        p = req.params
        missing = [t for t in p.output_types if t not in card.outputs]
        if missing:
            raise InvalidInput(f"model {model!r} cannot produce {missing}; it produces {card.outputs}")
        if p.options.dimensions is not None and card.dense_dim and p.options.dimensions > card.dense_dim:
            raise InvalidInput(f"dimensions {p.options.dimensions} is over the model's {card.dense_dim}")
        p.options.lora = self._adapter(card, p.options.lora, p.options.profile)
        items = [item.model_dump(exclude_none=True) for item in req.items]
        return Task(
            model=model,
            kind="encode",
            items=items,
            params=p.model_dump(exclude_none=True),
            est_tokens=sum(estimate_tokens(it["text"]) for it in items),
            deadline=time.time() + s.request_timeout_s,
            tenant=tenant,
        )

    def _adapter(self, card: ModelCard, lora: str | None, profile: str | None) -> str | None:
        """A request's LoRA adapter, else its profile's; it must exist (400 otherwise)."""
        lora = lora or card.profile(profile).lora
        if lora is not None:
            self.registry.lora.resolve(card, lora)
        return lora

    def annotate_score(self, model: str, body: Any, tenant: str | None = None) -> Task:
        """Validate a score body cheaply and wrap it as a queue task (the candidates are its items)."""
        card = self.card(model)
        check_task(card, "score")
        req = parse_score(body)
        s = self.settings
        texts = [("query", req.query.text)] + [(f"items.{i}", it.text) for i, it in enumerate(req.items)]
        self._check_limits(len(req.items), texts)
        req.options.lora = self._adapter(card, req.options.lora, req.options.profile)
        items = [item.model_dump(exclude_none=True) for item in req.items]
        query = req.query.model_dump(exclude_none=True)
        params: dict[str, Any] = {"query": query, "options": req.options.model_dump(exclude_none=True)}
        if req.instruction is not None:
            params["instruction"] = req.instruction
        q_tokens = estimate_tokens(query["text"])
        return Task(
            model=model,
            kind="score",
            items=items,
            params=params,
            est_tokens=sum(q_tokens + estimate_tokens(it["text"]) for it in items),
            deadline=time.time() + s.request_timeout_s,
            tenant=tenant,
        )

    async def submit(self, task: Task) -> dict[str, Any]:
        """Enqueue and wait for the worker's result, bounded by the task's deadline."""
        if not self.ready:
            await self.start()
        assert self.queue is not None
        QUEUE_DEPTH.set(await self.queue.depth())
        try:
            return await asyncio.wait_for(self.queue.submit(task), max(0.0, task.deadline - time.time()))
        except TimeoutError:
            raise DeadlineExceeded(f"no result within {self.settings.request_timeout_s:.0f}s") from None

    # -- SDK surface -------------------------------------------------------------------------------

    async def encode_body(self, model: str, body: Any) -> dict[str, Any]:
        """Encode a wire body; returns the wire result {model, items, timing}."""
        started = time.perf_counter()
        result = await self.submit(self.annotate_encode(model, body))
        result["timing"]["total_ms"] = (time.perf_counter() - started) * 1000
        return {"model": model, **result}

    async def score_body(self, model: str, body: Any) -> dict[str, Any]:
        """Score a wire body; returns the wire result {model, query_id?, scores, timing}."""
        started = time.perf_counter()
        result = await self.submit(self.annotate_score(model, body))
        result["timing"]["total_ms"] = (time.perf_counter() - started) * 1000
        return {"model": model, **result}

    async def models(self) -> list[dict[str, Any]]:
        """What /v1/models lists: each card, whether it is loaded, and its outputs."""
        return [model_info(c, self.registry.is_loaded(c.id)) for c in self.catalogue.known()]

    async def model(self, model: str) -> dict[str, Any]:
        card = self.card(model)
        return model_info(card, self.registry.is_loaded(card.id))


def model_info(card: ModelCard, loaded: bool) -> dict[str, Any]:
    dims: dict[str, int] = {}
    if card.dense_dim and "dense" in card.outputs:
        dims["dense"] = card.dense_dim
    if card.multivector is not None and "multivector" in card.outputs:
        dim = card.multivector.dim or card.dense_dim
        if dim:
            dims["multivector"] = dim
    if card.sparse is not None and card.sparse.vocab_size:
        dims["sparse"] = card.sparse.vocab_size
    return {
        "name": card.id,
        "description": card.description,
        "family": card.family,
        "tasks": card.tasks,
        "inputs": ["text"],
        "outputs": card.outputs,
        "dims": dims,
        "loaded": loaded,
        "state": "loaded" if loaded else "available",
        "max_sequence_length": card.max_seq_len,
        "profiles": sorted(card.profiles),
    }
