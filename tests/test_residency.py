"""Tiered residency: LRU demotion under a device budget, in-use protection, host-RAM reloads, pinning, idle TTL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from prometheus_client import REGISTRY

from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.errors import ResourceExhausted
from engine.residency import footprint
from engine.residency.manager import DEVICE, DISK, HOST, ResidencyManager
from engine.runtime import AsyncEngine
from tests.residency_support import budget_for, tiny_models

TEXTS = ["the cat sat on the mat", "a dog in paris", "hello world"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return tiny_models(tmp_path_factory.mktemp("residency"))


def manager(models: list[str], fits: float, host_fits: float = 10, **kw: object) -> ResidencyManager:
    settings = EngineSettings(
        device_budget=budget_for(models[0], fits), host_budget=budget_for(models[0], host_fits), **kw
    )
    return ResidencyManager(Catalogue(), "cpu", True, settings)


async def encode_all(engine: AsyncEngine, model: str) -> np.ndarray:
    return np.stack([r["dense"] for r in await engine.encode(model, TEXTS)])


async def test_mix_over_four_models_with_room_for_two(models: list[str]) -> None:
    """Every request is answered correctly, eviction follows LRU, and an evict/reload cycle changes nothing."""
    settings = EngineSettings(device_budget=budget_for(models[0], 2.5), host_budget=budget_for(models[0], 10))
    async with AsyncEngine(settings) as engine:
        reg = engine.registry
        first = {m: await encode_all(engine, m) for m in models}  # A B C D: A then B are demoted
        assert [(m, src, dst) for m, src, dst in reg.ledger.evictions] == [
            (models[0], DEVICE, HOST),
            (models[1], DEVICE, HOST),
        ]
        assert reg.resident() == [models[2], models[3]]
        await encode_all(engine, models[2])  # touch C: D is now the least recently used
        again = await encode_all(engine, models[0])  # A comes back from host RAM and pushes D out
        assert reg.ledger.evictions[-1] == (models[3], DEVICE, HOST)
        assert reg.resident() == [models[2], models[0]]
        assert np.array_equal(again, first[models[0]])
        for m in [models[3], models[1], models[0], models[2], models[1]]:  # a mixed stream over all four
            assert np.array_equal(await encode_all(engine, m), first[m])
        assert reg.ledger.loads == 4  # each model read from disk once; every later miss came from host RAM
        assert reg.used(DEVICE) <= reg.budget[DEVICE]


async def test_concurrent_mix_is_served(models: list[str]) -> None:
    """Many requests over all four models at once, two fit: every one is answered with its own model's vectors."""
    import asyncio

    settings = EngineSettings(device_budget=budget_for(models[0], 2.5), host_budget=budget_for(models[0], 10))
    async with AsyncEngine(settings) as engine:
        expected = {m: await encode_all(engine, m) for m in models}
        stream = [models[i % 4] for i in range(24)]
        results = await asyncio.gather(*(encode_all(engine, m) for m in stream))
        for m, got in zip(stream, results, strict=True):
            np.testing.assert_array_equal(got, expected[m])


async def test_model_in_use_is_not_evicted(models: list[str]) -> None:
    reg = manager(models, 2.5, evict_wait_s=0.2)
    a, b, c, _ = models
    async with reg.use(a):
        await reg.get(b)  # A is least recently used now, but held by a batch
        await reg.get(c)
        assert reg.tier(a) == DEVICE and reg.tier(b) == HOST
        async with reg.use(c):  # both device slots held: a third model cannot get in
            with pytest.raises(ResourceExhausted):
                await reg.get(b)
    await reg.get(b)  # released: now it fits by demoting the least recently used
    assert reg.tier(b) == DEVICE


async def test_host_reload_reads_nothing_from_disk(models: list[str]) -> None:
    reg = manager(models, 1.5)
    a, b = models[:2]
    await reg.get(a)
    assert reg.ledger.disk_bytes_read > 0
    await reg.get(b)  # A is demoted to host RAM (a copy, not a drop)
    assert reg.tier(a) == HOST
    before = reg.ledger.disk_bytes_read
    await reg.get(a)
    assert reg.ledger.disk_bytes_read == before  # the host-RAM path reads zero bytes from disk
    assert reg.ledger.records[-1].source == HOST and reg.ledger.records[-1].disk_bytes == 0
    assert reg.ledger.loads == 2


async def test_without_host_room_eviction_drops_to_disk(models: list[str]) -> None:
    reg = manager(models, 1.5, host_fits=0)
    a, b = models[:2]
    first = (await reg.get(a)).embed([[2, 30, 31, 3]])
    await reg.get(b)
    assert reg.tier(a) == DISK and reg.ledger.evictions[-1] == (a, DEVICE, DISK)
    before = reg.ledger.disk_bytes_read
    again = (await reg.get(a)).embed([[2, 30, 31, 3]])
    assert reg.ledger.disk_bytes_read > before and reg.ledger.loads == 3
    assert np.array_equal(first.numpy(), again.numpy())


async def test_host_tier_is_lru_too(models: list[str]) -> None:
    """Host RAM fits one demoted model: the older demotion is dropped to disk."""
    weights = footprint.header_bytes(Path(models[0]), torch.float32)
    settings = EngineSettings(device_budget=budget_for(models[0], 1.5), host_budget=int(1.5 * weights))
    reg = ResidencyManager(Catalogue(), "cpu", True, settings)  # host RAM: one set of weights, not two
    for m in models[:3]:
        await reg.get(m)
    assert reg.tier(models[0]) == DISK and reg.tier(models[1]) == HOST and reg.tier(models[2]) == DEVICE


async def test_pinned_model_stays(models: list[str]) -> None:
    reg = manager(models, 2.5, pin=[models[0]])
    for m in models + models:
        await reg.get(m)
    assert reg.tier(models[0]) == DEVICE
    assert all(m != models[0] for m, _, _ in reg.ledger.evictions)
    assert reg.pinned_models() == [models[0]]


async def test_idle_ttl_demotes_then_drops(models: list[str]) -> None:
    now = [1000.0]
    settings = EngineSettings(
        device_budget=budget_for(models[0], 4), host_budget=budget_for(models[0], 4), idle_ttl_s=10
    )
    reg = ResidencyManager(Catalogue(), "cpu", True, settings, clock=lambda: now[0])
    await reg.get(models[0])
    await reg.sweep()
    assert reg.tier(models[0]) == DEVICE
    now[0] += 11
    await reg.sweep()
    assert reg.tier(models[0]) == HOST
    now[0] += 10
    await reg.sweep()
    assert reg.tier(models[0]) == DISK
    await reg.aclose()


async def test_metrics_follow_loads_and_evictions(models: list[str]) -> None:
    """The exported series move with what the manager does (declaring them is not enough)."""
    a, b = models[:2]

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    demoted = value("shoal_evictions_total", model=a, from_tier=DEVICE, to_tier=HOST)
    disk, host = (value("shoal_model_load_seconds_count", source=src) for src in (DISK, HOST))
    reg = manager(models, 1.5)
    await reg.get(a)
    await reg.get(b)  # A goes to host RAM
    await reg.get(a)  # A comes back from host RAM, B goes
    assert value("shoal_evictions_total", model=a, from_tier=DEVICE, to_tier=HOST) == demoted + 1
    assert value("shoal_model_load_seconds_count", source=DISK) == disk + 2
    assert value("shoal_model_load_seconds_count", source=HOST) == host + 1
    assert value("shoal_resident_models", tier=DEVICE) == 1 and value("shoal_resident_models", tier=HOST) == 1
    assert value("shoal_tier_bytes", tier=DEVICE) == reg.used(DEVICE) > 0
    assert value("shoal_tier_bytes", tier=HOST) == reg.used(HOST) > 0
