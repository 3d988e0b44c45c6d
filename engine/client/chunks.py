"""Large calls in chunks: at most `window` chunks in flight, results gathered in the call's order."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from engine.tasks.results import ScoreEntry, ScoreReply

T = TypeVar("T")


async def in_chunks(n: int, size: int, window: int, run: Callable[[int, int], Awaitable[list[T]]]) -> list[T]:
    """run(start, stop) over [0, n) in chunks of `size`, `window` at a time, concatenated in order.

    Only `window` chunks' requests and replies exist at once; an error cancels the chunks still running.
    """
    if n <= size:
        return await run(0, n)
    parts: list[list[T]] = [[] for _ in range(0, n, size)]  # one slot per chunk, whatever its reply's length
    running: deque[tuple[int, asyncio.Future[list[T]]]] = deque()

    async def settle() -> None:
        start, task = running.popleft()
        parts[start // size] = await task

    try:
        for start in range(0, n, size):
            running.append((start, asyncio.ensure_future(run(start, min(n, start + size)))))
            if len(running) >= window:
                await settle()
        while running:
            await settle()
    finally:
        for _, task in running:
            task.cancel()
        if running:
            await asyncio.gather(*(t for _, t in running), return_exceptions=True)
    return [x for part in parts for x in part]


def merge_scores(parts: list[ScoreReply]) -> ScoreReply:
    """Score results of one query over chunks of its items -> one result, best first, ranked again."""
    scores = sorted((s for p in parts for s in p["scores"]), key=lambda s: -s["score"])
    ranked: list[ScoreEntry] = [{**s, "rank": rank} for rank, s in enumerate(scores)]
    tokens = sum(int(p.get("usage", {}).get("input_tokens", 0)) for p in parts)  # another SIE server may not say
    merged: ScoreReply = {"scores": ranked, "usage": {"input_tokens": tokens}}
    if "model" in parts[0]:
        merged["model"] = parts[0]["model"]
    if "query_id" in parts[0]:
        merged["query_id"] = parts[0]["query_id"]
    merged["timing"] = {"total_ms": sum(float(p.get("timing", {}).get("total_ms", 0.0)) for p in parts)}
    return merged
