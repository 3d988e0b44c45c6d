"""What a warm search costs beyond the query itself, at 2,000 and 100,000 chunks per store.

Per store (LanceDB, Qdrant Edge, Chroma embedded): one small file ingested by `pipeline.ingest` (so the store has
a manifest and a config), then synthetic chunks written straight to the store (random unit vectors, 120 words
each from a Zipf-distributed vocabulary) and its indexes built. Then, warm, for the same queries:
- encode: the query's embedding through the engine;
- store: the connector's hybrid search given that vector (the store's own dense and keyword queries, and the
  fusion), and each ranking on its own;
- `pipeline.Searcher.search` (hybrid, top 10) and, beside it, `pipeline.search_async` (the store, manifest and
  config opened per call).
Printed: p50 and p99 of each, and the Searcher's p50 less encode and store p50 (shoal's own part).

    nice -n 10 .venv/bin/python -m bench.retrieval_scale [--sizes 2000,100000] [--stores lancedb,qdrant,chroma]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.retrieval import NAMES, STORES

WORDS = 20_000
QUERIES = 60


def vocabulary(rng: np.random.Generator) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=int(rng.integers(4, 10)))) for _ in range(WORDS)]


def synthetic(n: int, dim: int, vocab: list[str], rng: np.random.Generator) -> list[dict[str, Any]]:
    p = 1 / np.arange(1, WORDS + 1)
    p /= p.sum()
    rows = []
    vecs = rng.normal(size=(n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    for i in range(n):
        words = rng.choice(WORDS, size=120, p=p)
        rows.append({
            "id": f"syn-{i}", "text": " ".join(vocab[w] for w in words), "root": "/synthetic",
            "source": f"syn-{i // 20}.txt", "chunk_index": i % 20, "pages": [], "heading_path": [],
            "vector": vecs[i], "entities": {}, "entity_tags": [],
        })  # fmt: skip
    return rows


async def timed(fn: Callable[[str], Awaitable[object]], queries: list[str]) -> tuple[float, float]:
    for q in queries[:5]:
        await fn(q)  # warm
    times = []
    for q in queries:
        t = time.perf_counter()
        await fn(q)
        times.append(time.perf_counter() - t)
    return float(np.percentile(times, 50)) * 1e3, float(np.percentile(times, 99)) * 1e3


async def one(engine: Any, url: str, work: Path, n: int, queries: list[str]) -> dict[str, Any]:
    from connectors.base import SearchRequest
    from pipeline import PipelineConfig, Searcher, ingest_async, search_async

    docs = work / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "seed.txt").write_text("A seed document, so the store has a manifest and a config.\n")
    await ingest_async(docs, PipelineConfig(db=url), client=engine)
    rng = np.random.default_rng(n)
    async with Searcher(url, client=engine) as s:
        model = s.config.dense.model
        dim = len((await engine.encode(model, "x", output_types=["dense"]))["dense"])
        rows = synthetic(n, dim, vocabulary(np.random.default_rng(0)), rng)
        t0 = time.perf_counter()
        for i in range(0, n, 2000):
            s.store.upsert(s.collection, rows[i : i + 2000])  # type: ignore[arg-type]
        s.store.finalize(s.collection)
        write_s = time.perf_counter() - t0
        vecs: dict[str, np.ndarray] = {}

        async def encode(q: str) -> None:
            r = await engine.encode(model, q, output_types=["dense"], is_query=True)
            vecs[q] = np.asarray(r["dense"], dtype=np.float32)

        def store_call(mode: str) -> Callable[[str], Awaitable[object]]:
            async def call(q: str) -> object:
                return s.store.search(s.collection, SearchRequest(vector=vecs[q], text=q, mode=mode, top_k=10))  # type: ignore[arg-type]

            return call

        out: dict[str, Any] = {"chunks": n, "write_s": write_s}
        out["encode"] = await timed(encode, queries)
        out["store hybrid"] = await timed(store_call("hybrid"), queries)
        out["store dense"] = await timed(store_call("dense"), queries)
        out["store text"] = await timed(store_call("text"), queries)
        out["Searcher"] = await timed(lambda q: s.search(q, top_k=10), queries)
    out["search_async"] = await timed(lambda q: search_async(q, db=url, top_k=10, client=engine), queries)
    out["own_ms"] = out["Searcher"][0] - out["encode"][0] - out["store hybrid"][0]
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000,100000")
    ap.add_argument("--stores", default=",".join(STORES))
    args = ap.parse_args()
    from bench import float32_settings
    from engine.runtime import AsyncEngine

    vocab = vocabulary(np.random.default_rng(0))
    qrng = np.random.default_rng(1)
    queries = [" ".join(vocab[int(w)] for w in qrng.integers(0, 2000, size=4)) for _ in range(QUERIES)]
    cols = ["encode", "store hybrid", "store dense", "store text", "Searcher", "search_async"]
    print("| store | chunks | " + " | ".join(f"{c} p50 / p99 ms" for c in cols) + " | Searcher − encode − store (ms) |")
    print("|" + " --- |" * (len(cols) + 3))
    with tempfile.TemporaryDirectory(prefix="shoal-scale-") as tmp:
        async with AsyncEngine(float32_settings()) as engine:
            for n in map(int, args.sizes.split(",")):
                for key in args.stores.split(","):
                    url = STORES[key].format(d=Path(tmp) / f"{key}-{n}")
                    r = await one(engine, url, Path(tmp) / f"{key}-{n}", n, queries)
                    cells = " | ".join(f"{r[c][0]:.1f} / {r[c][1]:.1f}" for c in cols)
                    print(f"| {NAMES[key]} | {n:,} | {cells} | {r['own_ms']:.1f} |", flush=True)
                    print(f"  wrote {n} chunks in {r['write_s']:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
