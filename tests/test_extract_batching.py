"""Extract requests from many callers share forward calls (in-process and over NATS), label vectors are cached,
and residency holds GLiNER models like any other: measured footprint, LRU demotion, single-flight loads."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import EngineSettings
from engine.model.gliner_runtime import GlinerModel
from engine.residency import footprint
from engine.residency.manager import DEVICE, HOST
from engine.runtime import AsyncEngine
from tests.conftest import MINILM
from tests.extract_support import LABELS, texts
from tests.nats_support import NatsServer
from tests.residency_support import GatedLoader
from tests.tiny_gliner import reference

N = 50


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    server = NatsServer(tmp_path / "js").start()
    yield server.url
    server.stop()


def settings_for(queue: str, request: pytest.FixtureRequest, **kw: object) -> EngineSettings:
    url = request.getfixturevalue("nats_url") if queue == "nats" else None
    return EngineSettings(queue_url=url, **kw)


@pytest.mark.parametrize("queue", ["inprocess", pytest.param("nats", marks=pytest.mark.nats)])
@pytest.mark.slow
async def test_50_concurrent_requests_share_forward_calls(
    queue: str, gliner_dirs: dict[str, Path], request: pytest.FixtureRequest
) -> None:
    """50 callers, one text each: far fewer than 50 GLiNER calls, and each caller gets its own entities."""
    model = str(gliner_dirs["span"])
    items = texts(N, seed=21)
    async with AsyncEngine(settings_for(queue, request)) as eng:
        await eng.extract(model, "warm up the model", labels=LABELS)
        assert eng.worker is not None
        before = eng.worker.stats.batches
        results = await asyncio.gather(*(eng.extract(model, t, labels=LABELS) for t in items))
        calls = eng.worker.stats.batches - before
        print(f"\n{queue}: {N} concurrent extract requests ran in {calls} forward calls")
        assert calls <= N // 5, f"{calls} forward calls for {N} requests: they did not share batches"
    ref = reference(gliner_dirs["span"])
    for text, got in zip(items, results, strict=True):
        want = ref.predict_entities(text, LABELS, threshold=0.5)
        assert [(e["start"], e["end"], e["label"]) for e in got["entities"]] == [
            (e["start"], e["end"], e["label"]) for e in want
        ]


async def test_concurrent_classification_shares_batches_and_caches_labels() -> None:
    labels = ["sports", "cooking", "finance"]
    items = [f"text number {i} about the match and the final score" for i in range(N)]
    async with AsyncEngine(EngineSettings()) as eng:
        await eng.extract(MINILM, "warm up", labels=labels)  # label vectors are computed once, here
        assert eng.worker is not None
        before_batches, before_items = eng.worker.stats.batches, eng.worker.stats.items
        results = await asyncio.gather(*(eng.extract(MINILM, t, labels=labels) for t in items))
        assert eng.worker.stats.batches - before_batches <= N // 5
        assert eng.worker.stats.items - before_items == N  # only the items were encoded: labels came from the cache
    assert all(r["classifications"][0]["label"] == "sports" for r in results)


async def test_residency_holds_gliner_like_any_model(gliner_dirs: dict[str, Path], tiny_bert: Path) -> None:
    """Measured footprint, demotion to host RAM when another model needs the room, back without a disk read."""
    model = str(gliner_dirs["span"])
    card_budget = 8192  # the inferred card's token budget, which sizes the activation reserve
    weights, reserve = footprint.estimate(Path(model), card_budget, 256, footprint.torch.float32)
    assert weights > 0 and reserve > 0
    settings = EngineSettings(device_budget=int(1.5 * (weights + reserve)), host_budget=10 * (weights + reserve))
    async with AsyncEngine(settings) as eng:
        reg = eng.registry
        first = await eng.extract(model, "the cat from paris", labels=LABELS)
        loaded = await reg.get(model)
        assert isinstance(loaded, GlinerModel)
        entry_bytes = reg.used(DEVICE)
        assert entry_bytes == loaded.tensor_bytes() + reserve  # the measured size, plus the reserve
        assert abs(loaded.tensor_bytes() - weights) < 0.1 * weights  # the estimate from the checkpoint was close
        await eng.encode(str(tiny_bert), "a dog")  # room for one: GLiNER goes to host RAM
        assert reg.tier(model) == HOST and reg.tier(str(tiny_bert)) == DEVICE
        again = await eng.extract(model, "the cat from paris", labels=LABELS)  # back from host RAM
        assert reg.tier(model) == DEVICE and reg.ledger.loads == 2  # two disk loads in all: GLiNER, the BERT
        assert again["entities"] == first["entities"]


async def test_a_cold_gliner_loads_once_for_many_callers(gliner_dirs: dict[str, Path]) -> None:
    model = str(gliner_dirs["bi-span"])
    loader = GatedLoader(gated=True)
    async with AsyncEngine(EngineSettings(), loader=loader) as eng:
        calls = [asyncio.create_task(eng.extract(model, t, labels=LABELS)) for t in texts(8, seed=4)]
        await asyncio.to_thread(loader.entered.wait, 60)
        loader.open()
        results = await asyncio.gather(*calls)
    assert loader.calls == 1 and len(results) == 8


def test_batches_of_mixed_lengths_carry_little_padding() -> None:
    """Windows of very different lengths run apart on CPU (GLiNER computes every padded position); equal
    lengths still share one batch; without a slack only the token budget cuts; every row runs exactly once."""
    import random

    from engine.worker.batching import BatchLimits
    from engine.worker.extraction.entities import pad_slack, padded_batches

    limits = BatchLimits(max_tokens=100_000, max_items=256)
    mixed = [20, 200, 21, 199, 22, 201]
    assert padded_batches(mixed, limits) == [[0, 2, 4, 3, 1, 5]]
    assert padded_batches(mixed, limits, slack=64) == [[0, 2, 4], [3, 1, 5]]
    assert padded_batches([50] * 40, limits, slack=0) == [list(range(40))]
    assert pad_slack("cpu") is not None and pad_slack("cuda") is None
    rnd = random.Random(5)
    costs = [rnd.randint(10, 300) for _ in range(500)]
    batches = padded_batches(costs, BatchLimits(max_tokens=4096, max_items=32), slack=64)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        longest = max(costs[i] for i in b)
        assert len(b) <= 32 and len(b) * longest <= 4096
        assert len(b) == 1 or len(b) * longest - sum(costs[i] for i in b) <= 64
