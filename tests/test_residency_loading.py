"""Loads: one load for many concurrent callers, a bounded wait answering 503 MODEL_LOADING, others keep flowing."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.errors import ModelLoading
from engine.residency.manager import ResidencyManager
from engine.runtime import AsyncEngine
from tests.residency_support import GatedLoader, budget_for, tiny_models
from tests.waiting import until


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return tiny_models(tmp_path_factory.mktemp("loading"), 2)


async def test_twenty_concurrent_requests_one_load(models: list[str]) -> None:
    settings = EngineSettings(device_budget=budget_for(models[0], 4), host_budget=budget_for(models[0], 4))
    loader = GatedLoader(gated=True)
    async with AsyncEngine(settings, loader=loader) as engine:
        requests = [asyncio.create_task(engine.encode(models[0], f"text number {i}")) for i in range(20)]
        # the load has started and is held at the gate, and the worker has pulled all 20 requests
        assert await asyncio.to_thread(loader.entered.wait, 30), "the load never started"
        await until(lambda: _depth_zero(engine), what="all 20 requests pulled")
        loader.open()
        results = await asyncio.gather(*requests)
        assert loader.calls == 1 and engine.registry.ledger.loads == 1
        assert all(r["dense"].shape == (32,) for r in results)


async def test_registry_single_flight(models: list[str]) -> None:
    loader = GatedLoader(gated=True)
    reg = ResidencyManager(
        Catalogue(), "cpu", True, EngineSettings(device_budget=budget_for(models[0], 4)), loader=loader
    )
    waiters = [asyncio.create_task(reg.get(models[0])) for _ in range(20)]
    assert await asyncio.to_thread(loader.entered.wait, 30), "the load never started"  # every get() is waiting now
    loader.open()
    got = await asyncio.gather(*waiters)
    assert loader.calls == 1 and all(g is got[0] for g in got)


async def test_bounded_wait_answers_model_loading(models: list[str]) -> None:
    settings = EngineSettings(
        device_budget=budget_for(models[0], 4), host_budget=budget_for(models[0], 4), load_wait_s=0.05
    )
    loader = GatedLoader(gated=True)
    loader.gate.set()  # the first model loads at once; the gate closes before the slow one
    async with AsyncEngine(settings, loader=loader) as engine:
        warm = await engine.encode(models[1], "hello world")  # resident before the slow load starts
        loader.gate.clear()
        with pytest.raises(ModelLoading) as err:
            await engine.encode(models[0], "hello world")
        assert err.value.status == 503 and err.value.retry_after and err.value.retry_after >= 1
        # the load carries on in the background while the other model keeps serving
        again = await engine.encode(models[1], "hello world")
        np.testing.assert_array_equal(again["dense"], warm["dense"])
        with pytest.raises(ModelLoading):
            await engine.encode(models[0], "second try while loading")
        loader.open()
        await until(lambda: engine.registry.is_loaded(models[0]), what=f"{models[0]} loading")
        assert (await engine.encode(models[0], "hello world"))["dense"].shape == (32,)
        assert loader.calls == 2  # one load each, however many requests asked


def test_http_model_loading_has_retry_after(models: list[str]) -> None:
    from fastapi.testclient import TestClient

    from engine.http.app import create_app

    settings = EngineSettings(load_wait_s=0.05)
    loader = GatedLoader(gated=True)
    engine = AsyncEngine(settings, loader=loader)
    with TestClient(create_app(engine)) as client:
        r = client.post(f"/v1/encode/{models[0]}", json={"items": [{"text": "hi"}]})
        assert r.status_code == 503 and r.json()["detail"]["code"] == "MODEL_LOADING"
        assert int(r.headers["Retry-After"]) >= 1
        loader.open()


async def _depth_zero(engine: AsyncEngine) -> bool:
    assert engine.queue is not None
    return await engine.queue.depth() == 0
