"""Honouring backpressure: a call answered MODEL_LOADING, QUEUE_FULL or RESOURCE_EXHAUSTED is tried again
after the Retry-After the server gave, within a bounded number of attempts and total wait."""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from engine.errors import ShoalError, error_from_code

T = TypeVar("T")
TRANSIENT = frozenset({"MODEL_LOADING", "QUEUE_FULL", "RESOURCE_EXHAUSTED"})


@dataclass(frozen=True)
class RetryPolicy:
    """How long a client keeps asking: `attempts` in all (1 never retries), at most `max_wait_s` of sleeping
    summed over the retries, each sleep the server's Retry-After (`default_wait_s` when it gave none)."""

    attempts: int = 5
    max_wait_s: float = 120.0
    default_wait_s: float = 1.0
    codes: frozenset[str] = field(default=TRANSIENT)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be at least 1 (got {self.attempts})")
        for name in ("max_wait_s", "default_wait_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"RetryPolicy.{name} must be a finite number of seconds >= 0 (got {value})")


NO_RETRY = RetryPolicy(attempts=1)


def retry_after_seconds(header: str | None) -> float | None:
    """A Retry-After header (delta seconds or an HTTP date) as seconds from now; None when absent or unreadable."""
    if not header:
        return None
    try:
        seconds = float(header)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


async def with_retries(
    policy: RetryPolicy, call: Callable[[], Awaitable[T]], sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> T:
    """`call()`'s result, retried while it fails with a transient code; the last error, its message saying
    how many attempts and how long were spent, once the attempts or the wait budget run out."""
    waited = 0.0
    for attempt in range(1, policy.attempts + 1):
        try:
            return await call()
        except ShoalError as e:
            if e.code not in policy.codes:
                raise
            delay = e.retry_after if e.retry_after is not None else policy.default_wait_s
            left = policy.max_wait_s - waited
            if attempt == policy.attempts or left <= 0:
                if attempt == 1:
                    raise
                raise gave_up(e, attempt, waited) from None
            delay = min(delay, left)
            await sleep(delay)
            waited += delay
    raise AssertionError("unreachable: the last attempt returns or raises")


def gave_up(e: ShoalError, attempts: int, waited: float) -> ShoalError:
    """The last error again (same type and code), saying the client already retried it."""
    message = f"{e.message} (gave up after {attempts} attempts and {waited:.1f}s of waiting as the server asked)"
    err = error_from_code(e.code, message, e.retry_after)
    err.status = e.status
    return err
