"""Admission control for requests from the network: a bounded number in flight per model, sized from the
model's measured rate so that an admitted request waits about `target_wait_s`; past it, 503 QUEUE_FULL with
Retry-After at once, so overload sheds requests instead of making every caller wait.

The bound is Little's law: in flight = completions per second x target wait, measured over the last
`WINDOW_S` seconds of completions, never below `min_in_flight` (a model that has not answered yet, or a
slow one, still gets that many) nor above `max_in_flight`.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.errors import QueueFull

WINDOW_S = 5.0  # completions counted for the rate


@dataclass
class ModelLoad:
    """One model's admitted requests and its recent completion times."""

    in_flight: int = 0
    done: deque[float] = field(default_factory=deque)


class Admission:
    """`enter(model)` admits a request or raises QueueFull; `leave(model)` when it is answered."""

    def __init__(
        self,
        target_wait_s: float,
        min_in_flight: int,
        max_in_flight: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target_wait_s = target_wait_s
        self.min_in_flight = max(1, min_in_flight)
        self.max_in_flight = max(self.min_in_flight, max_in_flight)
        self.clock = clock
        self.models: dict[str, ModelLoad] = {}
        self.shed = 0

    def rate(self, model: str) -> float:
        """Completions per second of `model` over the last WINDOW_S seconds."""
        load = self.models.get(model)
        if load is None:
            return 0.0
        now = self.clock()
        while load.done and load.done[0] < now - WINDOW_S:
            load.done.popleft()
        if len(load.done) < 2:
            return 0.0
        span = max(now - load.done[0], 1e-3)
        return len(load.done) / span

    def limit(self, model: str) -> int:
        wanted = math.ceil(self.rate(model) * self.target_wait_s)
        return min(self.max_in_flight, max(self.min_in_flight, wanted))

    def enter(self, model: str) -> None:
        load = self.models.setdefault(model, ModelLoad())
        limit = self.limit(model)
        if load.in_flight >= limit:
            self.shed += 1
            rate = self.rate(model)
            retry = max(1.0, load.in_flight / rate) if rate > 0 else 1.0
            raise QueueFull(
                f"{load.in_flight} requests for {model!r} are in progress, as many as it answers in "
                f"{self.target_wait_s:g}s (SHOAL_ADMISSION_WAIT_S); retry later",
                retry_after=retry,
            )
        load.in_flight += 1

    def leave(self, model: str) -> None:
        load = self.models.get(model)
        if load is None:
            return
        load.in_flight = max(0, load.in_flight - 1)
        load.done.append(self.clock())
        if len(load.done) > 100_000:
            load.done.popleft()
