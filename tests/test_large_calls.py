"""Large calls: any number of items in one `encode`/`score`, streamed in chunks, results in order, with
peak memory bounded by the chunk window and not by the call (in-process Engine, and Client against a
server whose per-request cap is smaller than the call)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.helpers import WORDS, LiveServer, make_tiny_bert

SMALL, LARGE = 2_000, 20_000


def texts(n: int) -> list[str]:
    """n distinct short texts over the tiny vocabulary (the index written in words)."""
    return [" ".join(WORDS[int(d)] for d in str(i)) + " " + WORDS[i % len(WORDS)] for i in range(n)]


def transient_peak(call: Callable[[], list[Any]]) -> tuple[int, list[Any]]:
    """Bytes allocated at the peak of `call` beyond what its result keeps (tracemalloc, every thread)."""
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        out = call()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - max(kept, start), out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("large-calls-bert")))


@pytest.fixture(scope="module")
def reference(tiny: str) -> Iterator[Any]:
    import shoal

    with shoal.Engine() as engine:
        yield engine


def check_in_order(model: str, got: list[dict[str, Any]], all_texts: list[str], reference: Any) -> None:
    """Every result is there, in order: a sample spread over the call matches its text encoded alone."""
    assert len(got) == len(all_texts)
    picks = sorted({0, 1, len(all_texts) // 3, len(all_texts) // 2, len(all_texts) - 1, *range(255, 260)})
    want = reference.encode(model, [all_texts[i] for i in picks])
    for i, w in zip(picks, want, strict=True):
        np.testing.assert_allclose(got[i]["dense"], w["dense"], atol=1e-5)


@pytest.mark.slow
def test_engine_encodes_any_number_in_order_with_bounded_memory(tiny: str, reference: Any) -> None:
    import shoal

    big, small = texts(LARGE), texts(SMALL)
    with shoal.Engine() as engine:  # default settings: chunks of 256, 4 in flight
        engine.encode(tiny, small[:10])  # load the model before measuring
        small_peak, _ = transient_peak(lambda: engine.encode(tiny, small))
        large_peak, got = transient_peak(lambda: engine.encode(tiny, big))
        ids = engine.encode(tiny, [{"id": f"t{i}", "text": t} for i, t in enumerate(big[:3000])])
    check_in_order(tiny, got, big, reference)
    assert [r["id"] for r in ids] == [f"t{i}" for i in range(3000)]
    # 10x the items, about the same transient memory (measured 1.5x: collector timing), not 10x: the
    # window of chunks in flight bounds it, not the call
    assert large_peak < 3 * small_peak, (small_peak, large_peak)

    # the measure can fail: one unchunked call of the same size holds everything at once
    with shoal.Engine(max_items=LARGE, stream_chunk_items=LARGE) as unchunked:
        unchunked.encode(tiny, small[:10])
        whole_peak, _ = transient_peak(lambda: unchunked.encode(tiny, big))
    assert whole_peak > 4 * large_peak, (large_peak, whole_peak)


def test_engine_score_over_the_chunk_size_ranks_everything(tmp_path: Path) -> None:
    import shoal
    from tests.tiny_models import make, write_card

    make("bert", "ForSequenceClassification", tmp_path / "ce", num_labels=1)
    card = {"id": "tiny/ce-large", "family": "bert", "pooling": "cls", "max_seq_len": 64}
    card |= {"source": {"path": str(tmp_path / "ce")}, "tasks": ["score"], "outputs": ["score"]}
    write_card(tmp_path / "cards", card | {"score": {"kind": "classifier"}})
    docs = texts(700)
    with shoal.Engine(model_dir=tmp_path / "cards", stream_chunk_items=100) as engine:
        got = engine.score(
            "tiny/ce-large", {"id": "q", "text": "paris france"}, docs[:350] + [{"id": "x", "text": "cat"}]
        )
    with shoal.Engine(model_dir=tmp_path / "cards", max_items=1000, stream_chunk_items=1000) as engine:
        want = engine.score(
            "tiny/ce-large", {"id": "q", "text": "paris france"}, docs[:350] + [{"id": "x", "text": "cat"}]
        )
    assert got["query_id"] == "q"
    assert [s["item_id"] for s in got["scores"]] == [s["item_id"] for s in want["scores"]]
    assert [s["rank"] for s in got["scores"]] == list(range(351))
    np.testing.assert_allclose([s["score"] for s in got["scores"]], [s["score"] for s in want["scores"]], atol=1e-6)


@pytest.mark.slow
def test_client_splits_above_the_server_cap(tiny: str, reference: Any) -> None:
    import shoal

    srv = LiveServer(env={"SHOAL_MAX_ITEMS": "100", "SHOAL_LOCAL_MODELS": "1"}).wait_ready()  # the model is a folder
    try:
        assert httpx.get(f"{srv.url}/info").json()["max_client_batch_size"] == 100
        big, small = texts(LARGE), texts(SMALL)
        with shoal.Client(srv.url) as client:
            client.encode(tiny, small[:10])
            small_peak, _ = transient_peak(lambda: client.encode(tiny, small))
            large_peak, got = transient_peak(lambda: client.encode(tiny, big))
        metrics = httpx.get(f"{srv.url}/metrics").text
    finally:
        srv.stop()
    check_in_order(tiny, got, big, reference)
    assert large_peak < 3 * small_peak, (small_peak, large_peak)
    # one request per 100 items: 1 + 20 + 200 encode requests answered 200, none refused with 413
    lines = [x for x in metrics.splitlines() if x.startswith("shoal_requests_total") and 'code="200"' in x]
    encodes = sum(float(x.rsplit(" ", 1)[1]) for x in lines if 'endpoint="encode"' in x)
    assert encodes == 1 + SMALL // 100 + LARGE // 100
    assert 'code="413"' not in metrics
