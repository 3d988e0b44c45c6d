"""The worker loop: pull tasks, group them by model, run shared batches, settle every delivery."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from engine.config import EngineSettings
from engine.errors import DeadlineExceeded, InternalError, ResourceExhausted, ShoalError
from engine.metrics import BATCH_TOKENS, ITEMS, QUEUE_WAIT, TOKENS
from engine.oom import run_resilient
from engine.queue import Delivery, WorkQueue
from engine.registry import ModelRegistry
from engine.scoring import run_tasks

log = logging.getLogger("shoal.worker")
DEFAULT_PULL_TOKENS = 8192  # before any model is resident


@dataclass
class WorkerStats:
    """Counters a caller (or a test) can read: what this worker actually computed."""

    batches: list[tuple[str, int, int]] = field(default_factory=list)  # (model, items, tokens)
    items: int = 0
    tokens: int = 0

    def record(self, model: str, items: int, tokens: int, kind: str = "encode") -> None:
        self.batches.append((model, items, tokens))
        self.items += items
        self.tokens += tokens
        BATCH_TOKENS.labels(model).observe(tokens)
        TOKENS.labels(model).inc(tokens)
        ITEMS.labels(model, kind).inc(items)


class Worker:
    """One pull loop over a queue; forward passes run in a thread so the event loop stays free."""

    def __init__(self, queue: WorkQueue, registry: ModelRegistry, settings: EngineSettings) -> None:
        self.queue = queue
        self.registry = registry
        self.settings = settings
        self.stats = WorkerStats()
        self._cold: set[asyncio.Task[None]] = set()  # batches waiting for their model to load

    async def run(self) -> None:
        while True:
            deliveries = await self.queue.pull(
                prefer=self.registry.resident(),
                max_tasks=1024,
                max_tokens=self.pull_budget(),
                wait=self.settings.batch_wait_ms / 1000,
            )
            by_model: dict[str, list[Delivery]] = defaultdict(list)
            for d in deliveries:
                by_model[d.task.model].append(d)
            for model, group in by_model.items():
                if self.registry.is_loaded(model):
                    await self.serve(model, group)
                else:  # a cold model loads in the background; batches of resident models keep flowing
                    task = asyncio.create_task(self.serve(model, group))
                    self._cold.add(task)
                    task.add_done_callback(self._cold.discard)

    def pull_budget(self) -> int:
        """Estimated tokens to take per pull: one batch of the largest resident model, so that with several
        workers on one queue the rest stays for the idle ones instead of one worker hoarding it."""
        if self.settings.max_batch_tokens:
            return self.settings.max_batch_tokens
        cuda = self.settings.device.startswith("cuda")
        budgets = []
        for model in self.registry.resident():
            card = self.registry.catalogue.get(model)
            budgets.append(card.profile("cuda" if cuda and "cuda" in card.profiles else None).max_batch_tokens)
        return max(budgets, default=DEFAULT_PULL_TOKENS)

    async def serve(self, model: str, group: list[Delivery]) -> None:
        """Run one model's deliveries; every delivery is acked or termed, whatever happens."""
        now = time.time()
        live: list[Delivery] = []
        for d in group:
            QUEUE_WAIT.labels(model).observe(max(0.0, now - d.task.enqueued_at))
            if d.task.deadline < now:
                await d.term(DeadlineExceeded("the request's deadline passed while it waited in the queue"))
            else:
                live.append(d)
        if not live:
            return
        held = False
        try:
            loaded = await self.registry.acquire(model, self.settings.load_wait_s)  # not evicted while held
            held = True
            card = loaded.card
            profile = card.profile(loaded.profile_name())
            budget = self.settings.max_batch_tokens or profile.max_batch_tokens
            budget = max(budget, loaded.tokenizer.max_len)
            outcomes = await run_resilient(  # out of memory: evict others and retry, then split
                lambda tasks, tokens: run_tasks(loaded, tasks, tokens, profile.max_batch_items, self.stats.record),
                [d.task for d in live],
                budget,
                loaded.tokenizer.max_len,
                lambda: self.registry.free_device(model),
            )
        except ShoalError as e:
            outcomes = [e] * len(live)
        except torch.OutOfMemoryError as e:
            outcomes = [ResourceExhausted(f"out of memory running {model!r}: {e}")] * len(live)
        except Exception as e:  # noqa: BLE001 - the worker survives anything a batch throws
            log.exception("batch for %s failed", model)
            outcomes = [InternalError(f"{type(e).__name__}: {e}")] * len(live)
        finally:
            if held:
                self.registry.release(model)
        for d, outcome in zip(live, outcomes, strict=True):
            if isinstance(outcome, ShoalError):
                await d.term(outcome)
            else:
                outcome.setdefault("timing", {})["queue_ms"] = (now - d.task.enqueued_at) * 1000
                await d.ack(outcome)
