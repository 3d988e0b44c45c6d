"""Loads: one load for many concurrent callers, a bounded wait answering 503 MODEL_LOADING, others keep flowing."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.cards import Catalogue
from engine.config import EngineSettings
from engine.errors import ModelLoading
from engine.residency import ResidencyManager
from engine.runtime import AsyncEngine
from tests.residency_support import GatedLoader, budget_for, tiny_models


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return tiny_models(tmp_path_factory.mktemp("loading"), 2)


async def test_twenty_concurrent_requests_one_load(models: list[str]) -> None:
    settings = EngineSettings(device_budget=budget_for(models[0], 4), host_budget=budget_for(models[0], 4))
    async with AsyncEngine(settings) as engine:
        loader = GatedLoader(gated=True)
        engine.registry._loader = loader
        requests = [asyncio.create_task(engine.encode(models[0], f"text number {i}")) for i in range(20)]
        await asyncio.sleep(0.2)  # all 20 are waiting on the one load
        loader.open()
        results = await asyncio.gather(*requests)
        assert loader.calls == 1 and engine.registry.loads == 1
        assert all(r["dense"].shape == (32,) for r in results)


async def test_registry_single_flight(models: list[str]) -> None:
    loader = GatedLoader(gated=True)
    reg = ResidencyManager(
        Catalogue(), "cpu", True, EngineSettings(device_budget=budget_for(models[0], 4)), loader=loader
    )
    waiters = [asyncio.create_task(reg.get(models[0])) for _ in range(20)]
    await asyncio.sleep(0.1)
    loader.open()
    got = await asyncio.gather(*waiters)
    assert loader.calls == 1 and all(g is got[0] for g in got)


async def test_bounded_wait_answers_model_loading(models: list[str]) -> None:
    settings = EngineSettings(
        device_budget=budget_for(models[0], 4), host_budget=budget_for(models[0], 4), load_wait_s=0.05
    )
    async with AsyncEngine(settings) as engine:
        warm = await engine.encode(models[1], "hello world")  # resident before the slow load starts
        loader = GatedLoader(gated=True)
        engine.registry._loader = loader
        with pytest.raises(ModelLoading) as err:
            await engine.encode(models[0], "hello world")
        assert err.value.status == 503 and err.value.retry_after and err.value.retry_after >= 1
        # the load carries on in the background while the other model keeps serving
        again = await engine.encode(models[1], "hello world")
        np.testing.assert_array_equal(again["dense"], warm["dense"])
        with pytest.raises(ModelLoading):
            await engine.encode(models[0], "second try while loading")
        loader.open()
        for _ in range(100):
            if engine.registry.is_loaded(models[0]):
                break
            await asyncio.sleep(0.05)
        assert (await engine.encode(models[0], "hello world"))["dense"].shape == (32,)
        assert loader.calls == 1


def test_http_model_loading_has_retry_after(models: list[str]) -> None:
    from fastapi.testclient import TestClient

    from engine.gateway import create_app

    settings = EngineSettings(load_wait_s=0.05)
    engine = AsyncEngine(settings)
    loader = GatedLoader(gated=True)
    engine.registry._loader = loader
    with TestClient(create_app(engine)) as client:
        r = client.post(f"/v1/encode/{models[0]}", json={"items": [{"text": "hi"}]})
        assert r.status_code == 503 and r.json()["detail"]["code"] == "MODEL_LOADING"
        assert int(r.headers["Retry-After"]) >= 1
        loader.open()
