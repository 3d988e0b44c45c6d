"""Waiting on a condition with a deadline that fails the test (instead of sleeping a fixed time)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def until(
    check: Callable[[], bool | Awaitable[bool]], timeout: float = 30.0, what: str = "the condition"
) -> None:
    """Poll `check` (sync or async) until it holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f}s")
        await asyncio.sleep(0.02)
