"""Loaded models of one worker: load on first use (once, even under concurrent demand) and keep them."""

from __future__ import annotations

import asyncio

from engine.cards import Catalogue
from engine.errors import ModelLoadFailed, ShoalError
from engine.metrics import MODEL_LOADS
from engine.runner import LoadedModel, load_model


class ModelRegistry:
    """Model id -> LoadedModel on this worker's device."""

    def __init__(self, catalogue: Catalogue, device: str = "cpu", offline: bool | None = None) -> None:
        self.catalogue = catalogue
        self.device = device
        self.offline = offline
        self._models: dict[str, LoadedModel] = {}
        self._loading: dict[str, asyncio.Task[LoadedModel]] = {}
        self.loads = 0

    def resident(self) -> list[str]:
        return list(self._models)

    def is_loaded(self, model: str) -> bool:
        return model in self._models

    async def get(self, model: str) -> LoadedModel:
        """The loaded model, loading it in a thread if needed; concurrent callers share one load."""
        if model in self._models:
            return self._models[model]
        if model not in self._loading:
            self._loading[model] = asyncio.create_task(self._load(model))
        try:
            return await asyncio.shield(self._loading[model])
        finally:
            if self._loading.get(model) is not None and self._loading[model].done():
                self._loading.pop(model, None)

    async def _load(self, model: str) -> LoadedModel:
        card = self.catalogue.get(model)
        try:
            loaded = await asyncio.to_thread(load_model, card, self.device, self.offline)
        except ShoalError:
            MODEL_LOADS.labels(model, "failed").inc()
            raise
        except Exception as e:  # noqa: BLE001 - a load never kills the worker; it reports why
            MODEL_LOADS.labels(model, "failed").inc()
            raise ModelLoadFailed(f"loading {model!r} failed: {type(e).__name__}: {e}") from e
        self._models[model] = loaded
        self.loads += 1
        MODEL_LOADS.labels(model, "ok").inc()
        return loaded
