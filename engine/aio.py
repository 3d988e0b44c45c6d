"""Small asyncio helpers shared by the engine's long-running loops."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger("shoal")


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]], patience: float = 10.0) -> None:
    """Cancel tasks and wait until they end, cancelling again when one swallowed it.

    On Python 3.11 `asyncio.wait_for` can lose a cancellation that races with its own timeout or result
    (fixed in 3.12), so a loop built on it may keep running after one cancel(); a plain `await task`
    would then wait forever. Gives up (and logs) after `patience` seconds instead of hanging shutdown.
    """
    pending = {t for t in tasks if not t.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while pending and loop.time() < deadline:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
    for t in pending:
        log.warning("task %s did not stop within %.0fs of being cancelled", t.get_name(), patience)
