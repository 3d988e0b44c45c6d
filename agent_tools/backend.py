"""Model calls for the tools through any shoal client (Engine, Client, AsyncEngine, AsyncClient), counted."""

from __future__ import annotations

import asyncio
import copy
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from engine.errors import ShoalError

if TYPE_CHECKING:
    import numpy as np

    from engine.client.calls import EncodeResult, ExtractResult, Item
    from engine.client.protocol import ShoalClient
    from engine.tasks.results import JSONObject

ITEM = re.compile(r"^items\.(\d+)(?:\.text)?")  # how the engine names a request's i-th text in its errors


@dataclass
class CallCount:
    """How many requests and items went to the models (a fixed set of counters: it never grows)."""

    encode_requests: int = 0
    encode_items: int = 0
    score_requests: int = 0
    score_pairs: int = 0
    extract_requests: int = 0
    extract_items: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ModelBackend:
    """`embed`, `score` and `extract` over a shoal client, split into requests of at most `batch_size` items.

    Cheap to make: a tool call makes its own, so `calls` counts that call's model requests only. With `lora`,
    every encode applies that adapter (a taxonomy's tuned encoder, agent_tools/taxonomy/tune.py).
    """

    def __init__(self, client: ShoalClient, batch_size: int = 256, lora: str | None = None) -> None:
        self.client = client.aio  # awaited whichever client it is (a blocking facade runs on its own loop)
        self.batch_size = batch_size
        self.lora = lora
        self.calls = CallCount()
        self.where = "texts.{i}"  # what the tool's caller calls the i-th text, for the engine's errors about one

    def naming(self, where: str) -> ModelBackend:
        """A backend over the same client whose errors about the i-th text name it `where` with {i} filled
        in (the tool's argument, e.g. `passages.{i}`) rather than the engine request's `items.i.text`."""
        other = copy.copy(self)
        other.where = where
        return other

    def _renamed(self, e: ShoalError, start: int) -> ShoalError:
        m = ITEM.match(e.message)
        if m is None:
            return e
        out = copy.copy(e)
        out.message = self.where.format(i=start + int(m[1])) + e.message[m.end() :]
        out.args = (out.message,)
        return out

    def with_lora(self, lora: str | None) -> ModelBackend:
        """A backend over the same client whose encodes apply `lora` (None: the model as it is)."""
        other = copy.copy(self)  # the same client and the same call counts
        other.lora = lora
        return other

    async def encode(
        self, model: str, texts: list[str], *, is_query: bool = False, options: JSONObject | None = None
    ) -> list[EncodeResult]:
        """The SDK's encode results ({dense: array, ...}), one per text, in order."""

        if self.lora is not None:
            options = {**(options or {}), "lora": self.lora}

        async def one(start: int, chunk: list[str]) -> list[EncodeResult]:
            self.calls.encode_requests += 1
            self.calls.encode_items += len(chunk)
            try:
                return await self.client.encode(model, [*chunk], is_query=is_query or None, options=options)
            except ShoalError as e:
                raise self._renamed(e, start) from None

        parts = await asyncio.gather(*(one(s, c) for s, c in self._chunks(texts)))
        return [row for part in parts for row in part]

    async def extract(
        self, model: str, texts: list[str], labels: list[str], options: JSONObject | None = None
    ) -> list[ExtractResult]:
        """The SDK's extract results ({entities, classifications, ...}), one per text, in order."""

        async def one(start: int, chunk: list[str]) -> list[ExtractResult]:
            self.calls.extract_requests += 1
            self.calls.extract_items += len(chunk)
            try:
                return await self.client.extract(model, [*chunk], labels=labels, options=options)
            except ShoalError as e:
                raise self._renamed(e, start) from None

        parts = await asyncio.gather(*(one(s, c) for s, c in self._chunks(texts)))
        return [row for part in parts for row in part]

    async def embed(self, model: str, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        """Unit-length dense vectors, one row per text, in order."""
        import numpy as np

        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        rows = await self.encode(model, texts, is_query=is_query)
        vectors = np.stack([np.asarray(r["dense"], dtype=np.float32) for r in rows])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    async def score(self, model: str, query: str, texts: list[str]) -> np.ndarray:
        """A relevance score per text against one query (a cross-encoder's `score` task), in input order."""
        import numpy as np

        async def one(start: int, chunk: list[str]) -> list[tuple[int, float]]:
            self.calls.score_requests += 1
            self.calls.score_pairs += len(chunk)
            items: list[Item] = [{"id": str(start + i), "text": t} for i, t in enumerate(chunk)]
            try:
                result = await self.client.score(model, query, items)
            except ShoalError as e:
                raise self._renamed(e, start) from None
            return [(int(s["item_id"]), float(s["score"])) for s in result["scores"]]

        out = np.zeros(len(texts), dtype=np.float32)
        starts = range(0, len(texts), self.batch_size)
        for part in await asyncio.gather(*(one(s, texts[s : s + self.batch_size]) for s in starts)):
            for i, value in part:
                out[i] = value
        return out

    def _chunks(self, texts: list[str]) -> list[tuple[int, list[str]]]:
        return [(i, texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
