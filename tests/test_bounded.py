"""A long-running process keeps nothing that grows per batch or per eviction: totals are counters, and what is
kept for inspection (recent batches, loads, evictions) lives in fixed-size windows."""

from __future__ import annotations

import pytest

from engine.config import EngineSettings
from engine.residency import ledger
from engine.runtime import AsyncEngine
from engine.worker import loop
from tests.residency_support import budget_for, tiny_models

pytestmark = pytest.mark.slow
REQUESTS = 3000  # above both windows, so a list that grew per event would show


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return tiny_models(tmp_path_factory.mktemp("bounded"), 2)


async def test_thousands_of_batches_and_evictions_stay_bounded(models: list[str]) -> None:
    # room for one model on the device: alternating requests make every request one batch and one eviction
    settings = EngineSettings(
        device_budget=budget_for(models[0], 1.5), host_budget=budget_for(models[0], 4), batch_wait_ms=0
    )
    assert max(loop.WINDOW, ledger.WINDOW) < REQUESTS
    async with AsyncEngine(settings) as engine:
        for i in range(REQUESTS):
            await engine.encode(models[i % 2], "a short text")
        assert engine.worker is not None
        stats, book = engine.worker.stats, engine.registry.ledger
        # the totals saw everything
        assert stats.batches == REQUESTS and stats.items == REQUESTS
        assert book.evicted >= REQUESTS - 1 and book.loads == 2 and book.swap_ins >= REQUESTS - 2
        # the windows did not grow past their size
        assert len(stats.recent) == loop.WINDOW
        assert len(book.evictions) == ledger.WINDOW and len(book.records) == ledger.WINDOW
        # and they hold the latest events
        assert stats.recent[-1].model == models[(REQUESTS - 1) % 2]
        assert book.evictions[-1].model == models[REQUESTS % 2]
