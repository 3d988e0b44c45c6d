"""The SDK call surface shared by the in-process engine and the HTTP client, and result shaping.

Both implement three primitives (`encode_body`, `score_body`, `extract_body`: wire body in, wire result out), `models` and
`item_cap` (the most items one primitive call may carry); the user-facing `encode`, `score` and `extract` are written
once here on top of them. A call with more items than the cap is split into chunks of the cap, at most
`stream_window` of them in flight, so its memory is bounded by the window, not by the call (engine.client.
chunks).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, overload

import numpy as np
import numpy.typing as npt

from engine.client.chunks import in_chunks, merge_scores
from engine.client.retry import NO_RETRY, RetryPolicy, with_retries
from engine.tasks.extract import ExtractBody, build_extract_body
from engine.tasks.requests import EncodeBody, ItemInput, Options, ScoreBody, build_encode_body, build_score_body
from engine.tasks.results import EncodedItem, EncodeReply, ExtractedItem, ExtractReply, JSONObject, ScoreReply, Values

if TYPE_CHECKING:
    from engine.model.tokenizer import TextTokenizer

WIRE_DTYPES: dict[str, type[np.generic]] = {
    "float32": np.float32,
    "float16": np.float16,
    "int8": np.int8,
    "uint8": np.uint8,
    "binary": np.uint8,
    "ubinary": np.uint8,
}
Item = ItemInput  # a text, or {"id", "text", "metadata"}
ItemT = TypeVar("ItemT", bound=Item)  # a list of items may be of any kind of Item (list[str], list[dict[...]])
Array = npt.NDArray[np.generic]


class SparseArrays(TypedDict):
    """One text's vocabulary weights as arrays: the non-zero ids and their weights."""

    indices: npt.NDArray[np.int64]
    values: Array


class EncodeResult(TypedDict, total=False):
    """One item's encode result for SDK callers: the outputs asked for, as numpy arrays."""

    id: str  # the caller's id, when it gave one
    dense: Array  # [dims] (packed bits for binary dtypes)
    sparse: SparseArrays
    multivector: Array  # [num_tokens, token_dims]


class EncodeArgs(TypedDict, total=False):
    """The keyword arguments of `encode` (each as the wire request's params, docs/sdk.md)."""

    output_types: list[str] | None
    instruction: str | None
    output_dtype: str | None
    is_query: bool | None
    options: Options | None


class ScoreArgs(TypedDict, total=False):
    """The keyword arguments of `score`."""

    instruction: str | None
    options: Options | None


class ExtractArgs(TypedDict, total=False):
    """The keyword arguments of `extract`."""

    labels: list[str] | None
    instruction: str | None
    options: Options | None


ScoreResult = ScoreReply  # {model, query_id?, scores: [{item_id, score, rank}], usage, timing}, best first
ExtractResult = ExtractedItem  # one item's {id, entities, classifications, data}


def _array(values: Values, dtype: str) -> Array:
    """A wire array as numpy: msgpack already gives arrays; JSON gives lists, typed by the wire dtype."""
    return np.asarray(values, dtype=WIRE_DTYPES.get(dtype, np.float32))


def to_encode_results(items: list[EncodedItem]) -> list[EncodeResult]:
    """Wire items ({dense: {dims, dtype, values}}...) -> {id?, dense: ndarray, sparse: {...}, multivector}."""
    out = []
    for item in items:
        result: EncodeResult = {}
        if (item_id := item.get("id")) is not None:
            result["id"] = item_id
        if (dense := item.get("dense")) is not None:
            result["dense"] = _array(dense["values"], dense["dtype"])
        if (sparse := item.get("sparse")) is not None:
            indices = np.asarray(sparse["indices"], dtype=np.int64)
            result["sparse"] = {"indices": indices, "values": _array(sparse["values"], sparse["dtype"])}
        if (multi := item.get("multivector")) is not None:
            result["multivector"] = _array(multi["values"], multi["dtype"])
        out.append(result)
    return out


class ModelCalls(ABC):
    """encode / score / models for SDK callers, over the wire primitives an implementation provides.

    Each primitive call is retried under `retry` while it fails with a transient code (MODEL_LOADING,
    QUEUE_FULL, RESOURCE_EXHAUSTED), after the wait the server asked for (engine.client.retry).
    """

    retry: RetryPolicy = NO_RETRY

    @property
    def aio(self) -> ModelCalls:
        """The async call surface (`ShoalClient.aio`): an async core is its own."""
        return self

    @abstractmethod
    async def encode_body(self, model: str, body: EncodeBody) -> EncodeReply:
        """Encode a wire body; returns the wire result {model, items, usage, timing}."""

    @abstractmethod
    async def score_body(self, model: str, body: ScoreBody) -> ScoreReply:
        """Score a wire body; returns the wire result {model, query_id?, scores, usage, timing}."""

    @abstractmethod
    async def extract_body(self, model: str, body: ExtractBody) -> ExtractReply:
        """Extract from a wire body; returns the wire result {model, items, usage, timing}."""

    @abstractmethod
    async def models(self) -> list[dict[str, Any]]:
        """The model catalogue: one description per model."""

    async def item_cap(self) -> int:
        """The most items one `encode_body` / `score_body` call may carry; larger calls are split."""
        return 1 << 30

    stream_window: int = 4  # chunks of one large call in flight at once

    async def tokenizer(self, model: str) -> TextTokenizer:
        """The model's own tokenizer, for counting tokens on the caller's side (the pipeline's chunking): an
        in-process engine's as its settings resolve it; over HTTP, this machine's copy of the model's files."""
        from engine.model.tokenizer import tokenizer_for

        return await asyncio.to_thread(tokenizer_for, model)

    @abstractmethod
    async def close(self) -> None:
        """Release what this caller holds (connections, the engine's worker)."""

    @overload
    async def encode(self, model: str, items: Item, **args: Unpack[EncodeArgs]) -> EncodeResult: ...
    @overload
    async def encode(self, model: str, items: list[ItemT], **args: Unpack[EncodeArgs]) -> list[EncodeResult]: ...

    async def encode(
        self, model: str, items: Item | list[ItemT], **args: Unpack[EncodeArgs]
    ) -> EncodeResult | list[EncodeResult]:
        """Encode one item (returns one result) or a list (returns a list of results, in order)."""
        batch = items if isinstance(items, list) else [items]

        async def run(start: int, stop: int) -> list[EncodeResult]:
            body = build_encode_body(batch[start:stop], **args)
            wire = await with_retries(self.retry, lambda: self.encode_body(model, body))
            return to_encode_results(wire["items"])

        results = await in_chunks(len(batch), await self.item_cap(), self.stream_window, run)
        return results if isinstance(items, list) else results[0]

    async def score(self, model: str, query: Item, items: Sequence[Item], **args: Unpack[ScoreArgs]) -> ScoreResult:
        """Rank items against a query: {model, query_id?, scores: [{item_id, score, rank}]}, best first."""
        cap = await self.item_cap()
        if len(items) <= cap:
            whole = build_score_body(query, items, **args)
            return await with_retries(self.retry, lambda: self.score_body(model, whole))
        # every item keeps the id the server would give it ("item-<index>"), whichever chunk it lands in
        named: list[Item] = [it if _has_id(it) else _named(it, i) for i, it in enumerate(items)]

        async def run(start: int, stop: int) -> list[ScoreResult]:
            body = build_score_body(query, named[start:stop], **args)
            return [await with_retries(self.retry, lambda: self.score_body(model, body))]

        return merge_scores(await in_chunks(len(named), cap, self.stream_window, run))

    @overload
    async def extract(self, model: str, items: Item, **args: Unpack[ExtractArgs]) -> ExtractResult: ...
    @overload
    async def extract(self, model: str, items: list[ItemT], **args: Unpack[ExtractArgs]) -> list[ExtractResult]: ...

    async def extract(
        self, model: str, items: Item | list[ItemT], **args: Unpack[ExtractArgs]
    ) -> ExtractResult | list[ExtractResult]:
        """Entities or classifications of one item (one result) or a list (a list of results, in order)."""
        batch: Sequence[Item] = items if isinstance(items, list) else [items]
        cap = await self.item_cap()
        if len(batch) > cap:  # ids as the server would give them ("item-<index>"), whichever chunk
            batch = [it if _has_id(it) else _named(it, i) for i, it in enumerate(batch)]

        async def run(start: int, stop: int) -> list[ExtractResult]:
            body = build_extract_body(batch[start:stop], **args)
            answer = await with_retries(self.retry, lambda: self.extract_body(model, body))
            return answer["items"]

        results = await in_chunks(len(batch), cap, self.stream_window, run)
        return results if isinstance(items, list) else results[0]


def _has_id(item: Item) -> bool:
    return not isinstance(item, str) and item.get("id") is not None


def _named(item: Item, index: int) -> JSONObject:
    return {**({"text": item} if isinstance(item, str) else item), "id": f"item-{index}"}
