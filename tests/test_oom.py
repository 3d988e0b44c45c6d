"""Out-of-memory recovery: evict and retry, smaller batches, split; every request answered, the worker lives."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from engine.config import EngineSettings
from engine.errors import ResourceExhausted
from engine.model.memory import FaultInjector
from engine.residency.manager import DEVICE, HOST
from engine.runtime import AsyncEngine
from engine.worker.recovery import Recovery
from tests.residency_support import budget_for, tiny_models

TEXTS = [f"text {w} number {i}" for i, w in enumerate(["cat", "dog", "bird", "fish", "tree", "house"])]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return tiny_models(tmp_path_factory.mktemp("oom"), 2)


@pytest.fixture
def faults() -> FaultInjector:
    """Out-of-memory injection, handed to the engine through its constructor."""
    return FaultInjector()


def settings_for(models: list[str]) -> EngineSettings:
    return EngineSettings(
        device_budget=budget_for(models[0], 4), host_budget=budget_for(models[0], 4), batch_wait_ms=50
    )


async def test_injected_oom_evicts_others_and_answers_every_request(models: list[str], faults: FaultInjector) -> None:
    async with AsyncEngine(settings_for(models), faults=faults) as engine:
        expected = [(await engine.encode(models[0], t))["dense"] for t in TEXTS]
        await engine.encode(models[1], "another model, resident and idle")
        faults.arm("forward", 1)
        got = await asyncio.gather(*(engine.encode(models[0], t) for t in TEXTS))
        assert faults.raised["forward"] >= 1
        for r, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(r["dense"], e, atol=1e-6)
        assert (models[1], DEVICE, HOST) in engine.registry.ledger.evictions  # the first remedy: evict the idle model


async def test_repeated_oom_splits_then_answers_the_rest() -> None:
    """A fake batch runner that fails above 2 tasks and always on task 'bad': the rest still get answers."""
    calls: list[tuple[list[str], int]] = []

    class Runner:
        def run(self, tasks: list[str], tokens: int) -> list[str]:
            calls.append((list(tasks), tokens))
            if len(tasks) > 2 or "bad" in tasks:
                raise torch.OutOfMemoryError("fake")
            return [f"ok:{t}" for t in tasks]

        async def make_room(self) -> int:  # nothing to evict
            return 0

    tasks = ["a", "b", "bad", "c", "d"]
    out = await Recovery(Runner(), budget=512, floor=128).run(tasks)
    assert out[:2] == ["ok:a", "ok:b"] and out[3:] == ["ok:c", "ok:d"]
    assert isinstance(out[2], ResourceExhausted) and out[2].status == 503
    assert min(tokens for _, tokens in calls) == 128  # the token budget halved to the floor before splitting


async def test_worker_survives_exhaustion(models: list[str], faults: FaultInjector) -> None:
    async with AsyncEngine(settings_for(models), faults=faults) as engine:
        faults.arm("forward", 1000)
        with pytest.raises(ResourceExhausted):
            await engine.encode(models[0], "always out of memory")
        faults.disarm()
        assert (await engine.encode(models[0], "fine again"))["dense"].shape == (32,)


async def test_oom_during_load_evicts_and_retries(models: list[str], faults: FaultInjector) -> None:
    async with AsyncEngine(settings_for(models), faults=faults) as engine:
        await engine.encode(models[0], "resident first")
        faults.arm("load", 1)
        r = await engine.encode(models[1], "needs a load that runs out of memory once")
        assert r["dense"].shape == (32,) and faults.raised["load"] == 1
        assert engine.registry.tier(models[0]) == HOST
