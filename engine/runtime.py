"""AsyncEngine, the composition root: catalogue + queue + residency + worker in one process; the HTTP edge,
the SDK's Engine and the worker process all sit on it. Engine is its blocking facade."""

from __future__ import annotations

import asyncio
import logging
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, overload

from engine.aio import cancel_and_wait
from engine.catalogue.cards import ModelCard, TaskKind
from engine.catalogue.catalogue import Catalogue, check_serves, model_info
from engine.catalogue.folders import FolderPolicy
from engine.catalogue.weights import weights_status
from engine.client.calls import ModelCalls
from engine.client.retry import NO_RETRY, RetryPolicy
from engine.client.sync import SyncFacade, blocking
from engine.config import EngineSettings
from engine.errors import DeadlineExceeded, InvalidInput
from engine.metrics import QUEUE_DEPTH
from engine.model.kernels import apply_kernels
from engine.model.loaded import Loader
from engine.model.loader import load
from engine.model.memory import FaultInjector
from engine.model.precision import available
from engine.model.threads import apply_threads, hold_compute_thread, release_compute_thread
from engine.model.tokenizer import TextTokenizer, tokenizer_for
from engine.queue.admission import Admission
from engine.queue.local import InProcessQueue
from engine.queue.protocol import WorkQueue
from engine.residency.autotune import Tuner
from engine.residency.manager import ResidencyManager
from engine.residency.store import device_kind, precision_summary
from engine.tasks.annotate import encode_task, score_task
from engine.tasks.extract import ExtractRequest, extract_task, parse_extract
from engine.tasks.requests import EncodeRequest, ScoreRequest, parse_encode, parse_score
from engine.tasks.results import EncodeReply, ExtractReply, Reply, ScoreReply
from engine.tasks.task import Task
from engine.worker.loop import Worker

log = logging.getLogger("shoal.engine")
NativeRequest = EncodeRequest | ScoreRequest | ExtractRequest  # what every dialect's edge translates into


class AsyncEngine(ModelCalls):
    """Annotates requests, enqueues them and (embedded mode) runs the worker that serves them.

    Collaborators come in through the constructor: `queue` (default: in-process, or NATS when the settings
    name a queue URL), `loader` (how residency loads a resolved model), `faults` (out-of-memory injection).
    `retry` is how the SDK calls (encode / score / extract) retry MODEL_LOADING, QUEUE_FULL and
    RESOURCE_EXHAUSTED; none by default, so a caller sees the engine's own bounded load wait.
    """

    def __init__(
        self,
        settings: EngineSettings | None = None,
        *,
        queue: WorkQueue | None = None,
        worker: bool = True,
        loader: Loader = load,
        faults: FaultInjector | None = None,
        retry: RetryPolicy = NO_RETRY,
        tuner: Tuner | None = None,
    ) -> None:
        self.settings = settings or EngineSettings()
        self.retry = retry
        s = self.settings
        self.catalogue = Catalogue(
            s.model_dir, FolderPolicy(s.local_models, tuple(s.model_roots)), max_id_chars=s.max_model_id_chars
        )
        self.queue: WorkQueue | None = queue
        self.admission: Admission | None = None  # set by the HTTP app: network requests are admitted, SDK calls not
        self.registry = ResidencyManager(
            self.catalogue, s.device, s.offline, s, loader=loader, faults=faults, tuner=tuner
        )
        self.worker: Worker | None = None
        self._faults = faults
        self._run_worker = worker
        self._tasks: list[asyncio.Task[None]] = []
        self._holds_compute = False
        self.ready = False
        self.draining = False
        self.stream_window = self.settings.stream_window

    async def item_cap(self) -> int:
        """In-process calls go to the queue in chunks of this many items (any number per call)."""
        return min(self.settings.max_items, self.settings.stream_chunk_items)

    async def start(self) -> AsyncEngine:
        if self.ready:
            return self
        self.threads = apply_threads(self.settings.threads)  # torch, tokenizer and event loop share the cores
        apply_kernels(self.settings.cpu_kernels, self.settings.kernel_cache)
        if self.queue is None and self.settings.queue_url:
            from engine.queue.nats.queue import NatsQueue  # distributed mode: nats-py is only needed here

            self.queue = await NatsQueue.connect(self.settings, gateway=True, worker=self._run_worker)
        if self.queue is None:
            self.queue = InProcessQueue()
        if self._run_worker:
            hold_compute_thread()
            self._holds_compute = True
            self.worker = Worker(self.queue, self.registry, self.settings, faults=self._faults)
            self._tasks.append(asyncio.create_task(self.worker.run(), name="shoal-worker"))
            if self.settings.idle_release_s > 0:  # an idle worker gives freed memory back to the OS
                idle = self.worker.release_when_idle(self.settings.idle_release_s)
                self._tasks.append(asyncio.create_task(idle, name="shoal-release"))
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
        if self._holds_compute:
            self._holds_compute = False
            await asyncio.to_thread(release_compute_thread)  # joins the compute thread when no engine runs

    async def __aenter__(self) -> AsyncEngine:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- gateway side ------------------------------------------------------------------------------

    def card(self, model: str) -> ModelCard:
        return self.catalogue.get(model)

    def serving(self, model: str, task: TaskKind) -> ModelCard:
        """The card of a model that serves `task`: 404 for an unknown model, 400 for one that does not serve
        the task; every task's entry checks this first, before its body is read."""
        card = self.card(model)
        check_serves(card, task)
        return card

    def annotate(self, model: str, req: NativeRequest, tenant: str | None = None) -> Task:
        """A native request as a typed task, every default resolved against the card of a model serving it; 400
        for a precision (options.precision) this engine's device does not offer."""
        if isinstance(req, EncodeRequest):
            task = encode_task(self.serving(model, "encode"), req, self.settings, tenant)
        elif isinstance(req, ScoreRequest):
            task = score_task(self.serving(model, "score"), req, self.settings, tenant)
        else:
            task = extract_task(self.serving(model, "extract"), req, self.settings, tenant)
        device = self.settings.device
        if task.precision is not None and task.precision not in (offered := available(device)):
            raise InvalidInput(
                f"options.precision: this server's device ({device}) does not offer {task.precision}; it offers {offered}"
            )
        return task

    def read_encode(self, model: str, body: object) -> EncodeRequest:
        """An encode wire body validated as the native request (the model checked first)."""
        self.serving(model, "encode")
        return parse_encode(body, self.settings.max_items)

    def read_score(self, model: str, body: object) -> ScoreRequest:
        """A score wire body validated as the native request (the model checked first)."""
        self.serving(model, "score")
        return parse_score(body, self.settings.max_items)

    def read_extract(self, model: str, body: object) -> ExtractRequest:
        """An extract wire body validated as the native request (the model checked first)."""
        self.serving(model, "extract")
        return parse_extract(body, self.settings.max_items)

    def annotate_encode(self, model: str, body: object, tenant: str | None = None) -> Task:
        """Validate an encode body cheaply (no tokenising) and make it a typed task, defaults resolved."""
        return self.annotate(model, self.read_encode(model, body), tenant)

    def control_admission(self) -> None:
        """Bound the requests in flight per model (SHOAL_ADMISSION_WAIT_S); the HTTP app calls this, so
        network requests are shed under overload while the SDK's own calls wait their turn."""
        s = self.settings
        if s.admission_wait_s > 0:
            self.admission = Admission(s.admission_wait_s, s.admission_min_in_flight, s.admission_max_in_flight)

    async def submit(self, task: Task) -> Reply:
        """Enqueue and wait for the worker's result, bounded by the task's deadline; adds the total time."""
        if not self.ready:
            await self.start()
        assert self.queue is not None
        QUEUE_DEPTH.set(await self.queue.depth())
        admission = self.admission
        if admission is not None:
            admission.enter(task.model)  # QueueFull at once past the model's bound
        started = time.perf_counter()
        try:
            result = await asyncio.wait_for(self.queue.submit(task), max(0.0, task.deadline - time.time()))
        except TimeoutError:
            raise DeadlineExceeded(f"no result within {self.settings.request_timeout_s:.0f}s") from None
        finally:
            if admission is not None:
                admission.leave(task.model)
        result.setdefault("timing", {})["total_ms"] = (time.perf_counter() - started) * 1000
        result["model"] = task.model
        return result

    # -- the one entry of every task: each dialect's edge builds the native request, then calls run ---------

    @overload
    async def run(self, model: str, req: EncodeRequest, tenant: str | None = None) -> EncodeReply: ...
    @overload
    async def run(self, model: str, req: ScoreRequest, tenant: str | None = None) -> ScoreReply: ...
    @overload
    async def run(self, model: str, req: ExtractRequest, tenant: str | None = None) -> ExtractReply: ...

    async def run(self, model: str, req: NativeRequest, tenant: str | None = None) -> Reply:
        """Check the model serves the request's task, make the task and wait for its result (the worker answers
        a task with its kind's result: engine.worker.dispatch)."""
        return await self.submit(self.annotate(model, req, tenant))

    # -- SDK surface: wire bodies, validated as the native request ----------------------------------------

    async def encode_body(self, model: str, body: object) -> EncodeReply:
        """Encode a wire body; returns the wire result {model, items, usage, timing}."""
        return await self.run(model, self.read_encode(model, body))

    async def score_body(self, model: str, body: object) -> ScoreReply:
        """Score a wire body; returns the wire result {model, query_id?, scores, usage, timing}."""
        return await self.run(model, self.read_score(model, body))

    async def extract_body(self, model: str, body: object) -> ExtractReply:
        """Extract from a wire body; returns the wire result {model, items, usage, timing}."""
        return await self.run(model, self.read_extract(model, body))

    async def tokenizer(self, model: str) -> TextTokenizer:
        """The model's tokenizer, for the few routes that tokenize at the edge (TEI /tokenize, token ids)."""
        card = self.card(model)
        return await asyncio.to_thread(_tokenizer, card.id, self.settings.model_dir, self.settings.offline)

    async def detokenize(self, model: str, arrays: list[list[int]]) -> list[str]:
        """Texts of token-id arrays of the model's own tokenizer."""
        return (await self.tokenizer(model)).decode(arrays)

    async def models(self) -> list[dict[str, Any]]:
        """What /v1/models lists: each card, whether it is loaded, its outputs, and its tuned precisions."""
        return [self._info(c) for c in self.catalogue.known()]

    async def model(self, model: str) -> dict[str, Any]:
        return self._info(self.card(model))

    def _info(self, card: ModelCard) -> dict[str, Any]:
        """model_info plus `available` (its weights are here or can be downloaded) and `precision`: the last
        `shoal tune` on this device kind (precision in use, and each precision's gate figures), or None when the
        model was never tuned here."""
        info = model_info(card, self.registry.is_loaded(card.id))
        # weights here, or downloadable: a client can refuse work for a model that cannot load before it starts
        info["available"] = weights_status(card, self.settings.offline).source != "missing"
        store, kind = self.registry.profiles, device_kind(self.settings.device)
        info["precision"] = precision_summary(store.report(card.id, kind), store.get(card.id, kind))
        info["precision_in_use"] = self.registry.precision_in_use(card)
        return info


@lru_cache(maxsize=8)
def _tokenizer(model: str, model_dir: Path | None, offline: bool | None) -> TextTokenizer:
    return tokenizer_for(model, model_dir, offline)


class Engine(SyncFacade[AsyncEngine]):
    """The in-process engine: no server, same `encode(model, items, ...)` as the HTTP clients."""

    def __init__(
        self, settings: EngineSettings | None = None, *, retry: RetryPolicy = NO_RETRY, **overrides: Any
    ) -> None:
        settings = settings or EngineSettings(**overrides)

        async def make() -> AsyncEngine:
            return await AsyncEngine(settings, retry=retry).start()

        super().__init__(make)

    encode_body = blocking(AsyncEngine.encode_body)  # a wire body in, the whole wire result out
    extract_body = blocking(AsyncEngine.extract_body)
