"""Forward passes run on the process's one compute thread (engine/model/threads.py), so one OpenMP team does
all the work instead of a new team per pool thread spinning on the others' cores."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from engine.model import packed
from engine.model.threads import in_compute_thread

LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label", default="none")


def test_calls_share_one_thread_keep_their_context_and_raise_their_errors() -> None:
    async def main() -> tuple[set[int], list[str]]:
        LABEL.set("caller")
        results = await asyncio.gather(
            *(in_compute_thread(lambda: (threading.get_ident(), LABEL.get())) for _ in range(16))
        )
        with pytest.raises(ZeroDivisionError):
            await in_compute_thread(lambda: 1 / 0)
        return {r[0] for r in results}, [r[1] for r in results]

    threads, labels = asyncio.run(main())
    assert len(threads) == 1 and threads != {threading.get_ident()}
    assert set(labels) == {"caller"}


def test_concurrent_requests_run_every_forward_on_one_thread(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shoal

    seen: set[int] = set()
    forward = packed.PackedModel.forward

    def recording(self: packed.PackedModel, seqs: Any) -> Any:
        seen.add(threading.get_ident())
        return forward(self, seqs)

    monkeypatch.setattr(packed.PackedModel, "forward", recording)
    texts = [f"sentence number {i} about a topic" for i in range(24)]
    with shoal.Engine() as engine, ThreadPoolExecutor(4) as pool:  # four callers at once, as HTTP clients
        outs = list(pool.map(lambda i: engine.encode(str(tiny_bert), texts[i::4]), range(4)))
    assert sum(len(o) for o in outs) == len(texts)
    assert len(seen) == 1
