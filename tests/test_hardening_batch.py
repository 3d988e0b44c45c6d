"""One bad request never harms the rest of its batch: validated before batching at the edge, and, when a
shared batch still fails, re-run apart so only the culprit fails (30 good + 1 bad in one batch window)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from prometheus_client import REGISTRY

from engine.config import EngineSettings
from engine.errors import ShoalError
from engine.runtime import AsyncEngine
from engine.tasks.task import EncodeParams, Task, TaskItem
from tests.hardening_support import MINILM
from tests.helpers import WORDS, LiveServer

pytestmark = pytest.mark.slow
GOOD = [" ".join(WORDS[(i * 5 + k) % len(WORDS)] for k in range(3 + i % 9)) for i in range(30)]


def isolations() -> float:
    return REGISTRY.get_sample_value("shoal_batch_isolations_total", {"model": MINILM}) or 0.0


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    """Each good text's vector, encoded alone."""

    async def run() -> dict[str, np.ndarray]:
        async with AsyncEngine(EngineSettings(batch_wait_ms=0)) as engine:
            return {t: (await engine.encode(MINILM, t))["dense"] for t in GOOD}

    return asyncio.run(run())


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    srv = LiveServer(env={"SHOAL_BATCH_WAIT_MS": "300"}).wait_ready()  # a wide window: all 31 share a batch
    yield srv
    srv.stop()


async def test_a_poisoned_http_batch_fails_only_the_culprit(server: LiveServer, reference: dict) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        await client.post(f"/v1/encode/{MINILM}", json={"items": [{"text": "warm"}]})  # the model is resident
        bad = json.dumps({"items": [{"text": "poison \ud800 here"}]}).encode()  # JSON can carry a lone surrogate
        calls = [client.post(f"/v1/encode/{MINILM}", json={"items": [{"text": t}]}) for t in GOOD]
        calls.insert(15, client.post(f"/v1/encode/{MINILM}", content=bad, headers={"Content-Type": "application/json"}))
        replies = await asyncio.gather(*calls)
    culprit = replies.pop(15)
    assert culprit.status_code == 400 and culprit.json()["detail"]["code"] == "INVALID_INPUT"
    assert [r.status_code for r in replies] == [200] * 30
    for text, r in zip(GOOD, replies, strict=True):
        np.testing.assert_allclose(r.json()["items"][0]["dense"]["values"], reference[text], atol=1e-5)


async def test_a_batch_that_fails_as_a_whole_is_rerun_apart(reference: dict) -> None:
    """Tasks that pass the edge but break a shared batch (here: sent to a worker as a gateway of another
    version might, asking a dense model for sparse output) fail alone; the 30 others get their vectors."""
    async with AsyncEngine(EngineSettings(batch_wait_ms=300)) as engine:
        await engine.encode(MINILM, "warm")
        before = isolations()
        good = [engine.submit(engine.annotate_encode(MINILM, {"items": [{"text": t}]})) for t in GOOD]
        poison = Task(
            model=MINILM,
            items=[TaskItem(text="asks for what the model cannot make")],
            params=EncodeParams(output_types=("sparse",)),
            est_tokens=10,
            deadline=engine.annotate_encode(MINILM, {"items": [{"text": "x"}]}).deadline,
        )
        unencodable = Task(  # a text no tokenizer takes: fails in preparation, alone
            model=MINILM,
            items=[TaskItem(text="lone \ud800")],
            params=EncodeParams(),
            est_tokens=10,
            deadline=poison.deadline,
        )
        results = await asyncio.gather(
            *good[:10],
            engine.submit(poison),
            *good[10:20],
            engine.submit(unencodable),
            *good[20:],
            return_exceptions=True,
        )
        assert isolations() > before  # the shared batch failed and was split
    bad = [results.pop(10), results.pop(20)]
    assert all(isinstance(b, ShoalError) for b in bad), bad
    assert not any(isinstance(r, BaseException) for r in results), results
    for text, r in zip(GOOD, results, strict=True):
        np.testing.assert_allclose(r["items"][0]["dense"]["values"], reference[text], atol=1e-5)
