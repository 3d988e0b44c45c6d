"""The worker loop: pull tasks, group them by model (and the precision they ask for), run each group under the
recovery policy, settle every delivery."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from engine.config import EngineSettings
from engine.errors import DeadlineExceeded, InternalError, ResourceExhausted, ShoalError
from engine.metrics import BATCH_FILL, BATCH_TOKENS, COMPUTED_TOKENS, ITEMS, QUEUE_WAIT, TOKENS
from engine.model.allocator import release_memory
from engine.model.loaded import LoadedModel
from engine.model.memory import FaultInjector
from engine.model.precision import device_profile
from engine.queue.protocol import Delivery, WorkQueue
from engine.residency.manager import ResidencyManager
from engine.tasks.task import Task
from engine.worker.batching import BatchLimits
from engine.worker.dispatch import Outcome, run_tasks
from engine.worker.recovery import Recovery

log = logging.getLogger("shoal.worker")
DEFAULT_PULL_TOKENS = 8192  # before any model is resident
WINDOW = 1024  # recent batches kept for inspection; totals are counters
# Batches a pull may take from a queue no other worker pulls from. Four in-process callers sending 32
# passages each (about 1.4 batches) ran 1.06x slower than one call of all of them with one batch a pull,
# and level with it with two (bf16 MiniLM on an AMX Xeon, 2026-12-05).
PRIVATE_PULL_BATCHES = 2


class BatchRecord(NamedTuple):
    model: str
    kind: str
    items: int
    tokens: int


@dataclass
class WorkerStats:
    """What this worker computed: totals since start, and the last WINDOW batches (nothing grows with uptime)."""

    batches: int = 0
    items: int = 0
    tokens: int = 0
    recent: deque[BatchRecord] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def record(self, model: str, kind: str, items: int, tokens: int, *, budget: int | None = None) -> None:
        """One forward batch of `tokens` real tokens under a token budget (packed: every computed position is
        a real token, so computed tokens equal real tokens)."""
        self.recent.append(BatchRecord(model, kind, items, tokens))
        self.batches += 1
        self.items += items
        self.tokens += tokens
        BATCH_TOKENS.labels(model).observe(tokens)
        TOKENS.labels(model).inc(tokens)
        COMPUTED_TOKENS.labels(model).inc(tokens)
        if budget:
            BATCH_FILL.labels(model).observe(min(1.0, tokens / budget))
        ITEMS.labels(model, kind).inc(items)


class Worker:
    """One pull loop over a queue; forward passes run in a thread so the event loop stays free."""

    def __init__(
        self,
        queue: WorkQueue,
        registry: ResidencyManager,
        settings: EngineSettings,
        *,
        faults: FaultInjector | None = None,
    ) -> None:
        self.queue = queue
        self.registry = registry
        self.settings = settings
        self.stats = WorkerStats()
        self._faults = faults
        self._cold: set[asyncio.Task[None]] = set()  # batches waiting for their model to load
        self._last_pull = 0  # tasks the last pull took: callers overlap when it took more than one
        self._budgets: tuple[frozenset[str], int] = (frozenset(), DEFAULT_PULL_TOKENS)  # pull budget per resident set
        self._busy = 0  # batches of this worker running now
        self._worked = asyncio.Event()  # set when a batch ends
        self.releases = 0  # times an idle worker returned its freed memory to the OS

    def linger(self) -> float:
        """Seconds to wait for a fuller batch: the configured linger while callers overlap (the last pull took
        several tasks), none for a lone caller, whose request would only wait for company that never comes."""
        return self.settings.batch_wait_ms / 1000 if self._last_pull > 1 else 0.0

    async def run(self) -> None:
        while True:
            deliveries = await self.queue.pull(
                prefer=self.registry.resident(),
                max_tasks=1024,
                max_tokens=self.pull_budget(),
                wait=self.linger(),
            )
            self._last_pull = len(deliveries)
            by_model: dict[tuple[str, str | None], list[Delivery]] = {}
            for d in deliveries:
                by_model.setdefault((d.task.model, d.task.precision), []).append(d)
            for (model, precision), group in by_model.items():
                if self.registry.is_loaded(model, precision):
                    await self.serve(model, group, precision)
                else:  # a cold model loads in the background; batches of resident models keep flowing
                    task = asyncio.create_task(self.serve(model, group, precision))
                    self._cold.add(task)
                    task.add_done_callback(self._cold.discard)

    def pull_budget(self) -> int:
        """Estimated tokens to take per pull: one batch of the largest resident model on a shared queue, so
        that the rest stays for idle workers instead of one worker hoarding it; two on a queue of its own,
        so that requests a little over one batch are packed together into full batches instead of each
        leaving a small one behind."""
        batches = 1 if self.queue.shared else PRIVATE_PULL_BATCHES
        if self.settings.max_batch_tokens:
            return self.settings.max_batch_tokens * batches
        resident = frozenset(self.registry.resident())
        if resident != self._budgets[0]:  # worked out again only when the resident set changes
            budgets = [
                device_profile(self.registry.catalogue.get(m), self.settings.device).profile.max_batch_tokens
                for m in resident
            ]
            self._budgets = (resident, max(budgets, default=DEFAULT_PULL_TOKENS))
        return self._budgets[1] * batches

    async def release_when_idle(self, idle_s: float) -> None:
        """Return freed memory to the OS once no batch has run for `idle_s` (engine/model/allocator.py); while
        work flows it stays with the process, for the next batch to reuse."""
        while True:
            await self._worked.wait()
            self._worked.clear()
            await asyncio.sleep(idle_s)
            if not self._worked.is_set() and self._busy == 0:
                await asyncio.to_thread(release_memory)
                self.releases += 1

    async def serve(self, model: str, group: list[Delivery], precision: str | None = None) -> None:
        """Run one model's deliveries (in the precision they ask for, if any); every delivery is acked or termed,
        whatever happens."""
        self._busy += 1
        try:
            await self._serve(model, group, precision)
        finally:
            self._busy -= 1
            self._worked.set()

    async def _serve(self, model: str, group: list[Delivery], precision: str | None) -> None:
        pulled_at = time.time()
        live = await self._live(model, group, pulled_at)
        if not live:
            return
        outcomes: list[Outcome]
        try:
            async with self.registry.use(model, self.settings.load_wait_s, precision) as loaded:  # held: not evicted
                outcomes = await self._recovery(model, loaded, pulled_at).run([d.task for d in live])
                served_in(outcomes, loaded.precision.name)
        except ShoalError as e:
            outcomes = [e] * len(live)
        except torch.OutOfMemoryError as e:
            outcomes = [ResourceExhausted(f"out of memory running {model!r}: {e}")] * len(live)
        except Exception as e:  # noqa: BLE001 - the worker survives anything a batch throws
            log.exception("batch for %s failed", model)
            outcomes = [InternalError(f"{type(e).__name__}: {e}")] * len(live)
        for d, outcome in zip(live, outcomes, strict=True):
            if isinstance(outcome, ShoalError):
                await d.term(outcome)
            else:
                await d.ack(outcome)

    async def _live(self, model: str, group: list[Delivery], now: float) -> list[Delivery]:
        """The deliveries whose deadline has not passed; the others are termed DEADLINE_EXCEEDED."""
        live: list[Delivery] = []
        for d in group:
            QUEUE_WAIT.labels(model).observe(max(0.0, now - d.task.enqueued_at))
            if d.task.deadline < now:
                await d.term(DeadlineExceeded("the request's deadline passed while it waited in the queue"))
            else:
                live.append(d)
        return live

    def _recovery(self, model: str, loaded: LoadedModel, pulled_at: float) -> Recovery[Task, Outcome]:
        """The recovery policy over this model's batch, starting at the profile's token budget (never below
        the model's max_len)."""
        profile = loaded.precision.profile
        budget = max(self.settings.max_batch_tokens or profile.max_batch_tokens, loaded.max_len)
        batch = ModelBatch(model, loaded, self.registry, self.stats, profile.max_batch_items, pulled_at)
        return Recovery(batch, budget, loaded.max_len, model, self._faults)


def served_in(outcomes: list[Outcome], precision: str) -> None:
    """Each result says which precision served it (errors stay as they are)."""
    for outcome in outcomes:
        if not isinstance(outcome, ShoalError):
            outcome["precision"] = precision


@dataclass(frozen=True)
class ModelBatch:
    """One model's pulled tasks as the recovery policy runs them: through the handler table, every forward
    batch counted in the worker's stats against the token budget of the attempt."""

    model: str
    loaded: LoadedModel
    registry: ResidencyManager
    stats: WorkerStats
    max_items: int
    pulled_at: float

    def run(self, tasks: list[Task], tokens: int) -> list[Outcome]:
        return run_tasks(self.loaded, tasks, BatchLimits(tokens, self.max_items), Tally(self, tokens), self.pulled_at)

    async def make_room(self) -> int:
        """Evict the other models from the device (bytes freed)."""
        return await self.registry.free_device()  # the entry in use is held, so never among them


@dataclass(frozen=True)
class Tally:
    """Counts each forward batch of one attempt: (task kind, items, tokens) into the worker's stats."""

    batch: ModelBatch
    budget: int

    def __call__(self, kind: str, items: int, tokens: int) -> None:
        self.batch.stats.record(self.batch.model, kind, items, tokens, budget=self.budget)
