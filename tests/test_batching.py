"""Batching: concurrent callers share batches under the token budget and get their own results, in order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.config import EngineSettings
from engine.model.packing import pack_by_budget
from engine.runtime import AsyncEngine
from engine.worker.loop import PRIVATE_PULL_BATCHES, Worker


def test_pack_by_budget_respects_budget_and_covers_all() -> None:
    lengths = [5, 300, 17, 64, 64, 1, 250, 128, 33, 2]
    batches = pack_by_budget(lengths, max_tokens=320, max_items=4)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert sum(lengths[i] for i in b) <= 320
        assert len(b) <= 4
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)  # shortest first


def test_pack_by_budget_item_cap_and_empty() -> None:
    assert pack_by_budget([], 100, 4) == []
    assert [len(b) for b in pack_by_budget([1] * 10, 1000, 4)] == [4, 4, 2]


def _texts(caller: int, n: int) -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "worker", "queue", "batch", "token", "vector", "engine"]
    return [
        " ".join(words[(caller + i + k) % len(words)] for k in range(1 + (caller * 7 + i * 3) % 40)) for i in range(n)
    ]


async def test_concurrent_callers_share_batches_under_budget(tiny_bert: Path) -> None:
    budget = 1024
    settings = EngineSettings(max_batch_tokens=budget, batch_wait_ms=20)
    async with AsyncEngine(settings) as eng:
        model = str(tiny_bert)
        # reference: each caller alone
        alone = {c: await eng.encode(model, _texts(c, 6)) for c in range(12)}
        stats = eng.worker.stats
        alone_batches = stats.batches
        together = await asyncio.gather(*(eng.encode(model, _texts(c, 6)) for c in range(12)))
        batches = list(stats.recent)[alone_batches:]  # the window holds every batch of this short test
        assert stats.batches == alone_batches + len(batches)
    assert batches, "the worker recorded no batches"
    assert all(b.tokens <= budget for b in batches)
    total_items = sum(b.items for b in batches)
    assert total_items == 12 * 6
    # shared: fewer batches than the callers needed alone, and some batch holds more than one caller's items
    assert len(batches) < alone_batches
    assert max(b.items for b in batches) > 6
    for c, results in enumerate(together):
        for got, want in zip(results, alone[c], strict=True):
            np.testing.assert_allclose(got["dense"], want["dense"], atol=1e-5)


async def test_results_keep_request_order_and_ids(tiny_bert: Path) -> None:
    async with AsyncEngine(EngineSettings(max_batch_tokens=64)) as eng:
        items = [{"id": f"x{i}", "text": t} for i, t in enumerate(_texts(3, 20))]
        results = await eng.encode(str(tiny_bert), items)
        singles = [await eng.encode(str(tiny_bert), it) for it in items]
    assert [r["id"] for r in results] == [f"x{i}" for i in range(20)]
    for r, s in zip(results, singles, strict=True):
        np.testing.assert_allclose(r["dense"], s["dense"], atol=1e-5)


@pytest.mark.parametrize("budget", [64, 100])
async def test_budget_below_max_len_is_raised_to_fit_one_sequence(tiny_bert: Path, budget: int) -> None:
    """A configured budget below the model's max length still serves full-length inputs."""
    async with AsyncEngine(EngineSettings(max_batch_tokens=budget)) as eng:
        long = " ".join(["cat"] * 500)
        r = await eng.encode(str(tiny_bert), [long, "dog"])
        assert len(r) == 2
        assert all(b.tokens <= max(budget, 64) for b in eng.worker.stats.recent)


async def test_a_lone_caller_does_not_wait_for_company_but_overlapping_callers_do(tiny_bert: Path) -> None:
    """The batch linger (SHOAL_BATCH_WAIT_MS) is spent only while callers overlap: a caller alone is served at
    once; after a pull of several tasks the worker lingers again. Checked on the waits the worker asks for."""
    async with AsyncEngine(EngineSettings(batch_wait_ms=300)) as eng:
        model = str(tiny_bert)
        assert eng.queue is not None
        pull, waits = eng.queue.pull, []

        async def recording_pull(*args: Any, **kw: Any) -> Any:
            waits.append(kw["wait"])
            return await pull(*args, **kw)

        eng.queue.pull = recording_pull  # type: ignore[method-assign]
        for text in ("one", "caller", "alone"):
            await eng.encode(model, text)
        alone = list(waits)
        together = await asyncio.gather(*(eng.encode(model, _texts(c, 1)) for c in range(8)))
        await eng.encode(model, "after the crowd")
    assert len(together) == 8
    assert alone and set(alone) == {0.0}, f"a lone caller's pulls lingered: {alone}"
    assert 0.3 in waits[len(alone) :], f"overlapping callers never got the linger: {waits}"


@pytest.mark.parametrize("shared", [False, True])
async def test_a_private_queue_packs_requests_a_little_over_one_batch_together(tiny_bert: Path, shared: bool) -> None:
    """Requests of about 1.4 batches each: a worker alone on its queue takes two a pull (their items pack into
    full batches); on a queue other workers share it takes about one batch's worth and leaves the rest."""
    budget = 256
    async with AsyncEngine(EngineSettings(max_batch_tokens=budget, batch_wait_ms=0), worker=False) as eng:
        assert eng.queue is not None
        eng.queue.shared = shared  # type: ignore[misc]  # what a NATS queue says of itself
        model = str(tiny_bert)
        await eng.registry.get(model)
        calls = [asyncio.create_task(eng.encode(model, ["word " * 90] * 4)) for _ in range(4)]  # ~360 est. tokens
        await asyncio.sleep(0.05)  # all four queued before the worker starts
        worker = Worker(eng.queue, eng.registry, eng.settings)
        assert worker.pull_budget() == budget * (1 if shared else PRIVATE_PULL_BATCHES)
        first = await eng.queue.pull(prefer=[model], max_tasks=1024, max_tokens=worker.pull_budget(), wait=0)
        assert len(first) == (1 if shared else 2)
        for d in first:
            await d.nak()
        running = asyncio.create_task(worker.run())
        results = await asyncio.gather(*calls)
        running.cancel()
    assert [len(r) for r in results] == [4] * 4
