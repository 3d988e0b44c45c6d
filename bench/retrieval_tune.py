"""How connectors/fusion.py's defaults were chosen: a grid over the fusion's settings on ONE collection (CISI).

Each store's own dense and keyword rankings are fetched once per query (300 deep), then fused offline for every
setting: candidate depth, the dense weight of the convex combination, the rare-term share (off / on), beside
reciprocal-rank fusion at the same depths. Prints nDCG@10 and known-item top-1 per store and setting; the
defaults are the setting best on the mean over stores of nDCG@10 that keeps known-item top-1 near BM25's.

    nice -n 10 .venv/bin/python -m bench.retrieval_tune [--collection cisi] [--work DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.retrieval import NAMES, STORES, doc_ranking, known_items, ndcg10, reused_embeddings
from bench.retrieval_sets import COLLECTIONS

DEEP = 300
DEPTHS = (20, 50, 100, 200, 300)
WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7)
SHARES = (None, 0.01, 0.02, 0.05)


async def raw_rankings(engine: Any, writer: Any, url: str, folder: Path, texts: list[str]) -> list[tuple[list[Any], list[Any]]]:  # fmt: skip
    from connectors.base import SearchRequest
    from pipeline import PipelineConfig, Searcher, ingest_async

    await ingest_async(folder, PipelineConfig(db=url), client=writer)
    out = []
    async with Searcher(url, client=engine) as s:
        for t in texts:
            r = await engine.encode(s.config.dense.model, t, output_types=["dense"], is_query=True)
            vec = np.asarray(r["dense"], dtype=np.float32)
            dense = s.store.search(s.collection, SearchRequest(vector=vec, text=t, mode="dense", top_k=DEEP))
            text = s.store.search(s.collection, SearchRequest(text=t, mode="text", top_k=DEEP))
            out.append((dense, text))
    return out


def evaluate(raw: list[tuple[list[Any], list[Any]]], texts: list[str], judged: list[set[str]], items: list[str]) -> list[tuple[str, float, float]]:  # fmt: skip
    from connectors.fusion import Ranking, fuse, rrf_fuse

    n = len(judged)
    rows = []
    for d in DEPTHS:
        settings: list[tuple[str, Any]] = [(f"rrf depth {d}", None)]
        settings += [(f"convex w={w} depth {d} rare {s}", (w, s)) for w, s in itertools.product(WEIGHTS, SHARES)]
        for label, opt in settings:
            ranks = []
            for (dense, text), q in zip(raw, texts, strict=True):
                if opt is None:
                    hits = rrf_fuse([dense[:d], text[:d]], 300)
                else:
                    w, s = opt
                    rankings = [Ranking("dense", dense[:d], d), Ranking("text", text[:d], d)]
                    hits = fuse(q, rankings, 300, weight=w, share=s)
                ranks.append(doc_ranking(hits))
            nd = float(np.mean([ndcg10(r, rel) for r, rel in zip(ranks[:n], judged, strict=True)]))
            ki = float(np.mean([bool(r) and r[0] == doc for r, doc in zip(ranks[n:], items, strict=True)]))
            rows.append((label, nd, ki))
    return rows


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default="cisi")
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--work", type=Path)
    args = ap.parse_args()
    from bench import float32_settings
    from engine.runtime import AsyncEngine

    coll = COLLECTIONS[args.collection]()
    qids = list(coll.qrels)
    pairs = known_items(coll)
    texts = [coll.queries[q] for q in qids] + [w for _, w in pairs]
    judged = [coll.qrels[q] for q in qids]
    with tempfile.TemporaryDirectory(prefix="shoal-tune-") as tmp:
        work = (args.work or Path(tmp)) / coll.name
        folder = work / "docs"
        folder.mkdir(parents=True, exist_ok=True)
        for d, text in coll.docs.items():
            if not (folder / f"{d}.txt").is_file():
                (folder / f"{d}.txt").write_text(text + "\n")
        table: dict[str, dict[str, tuple[float, float]]] = {}
        async with AsyncEngine(float32_settings()) as engine:
            writer = reused_embeddings(engine)
            for key in args.stores.split(","):
                kept = work / f"raw-{key}.pkl"  # a kept work folder (--work) fetches the rankings once
                if kept.is_file():
                    raw = pickle.loads(kept.read_bytes())
                else:
                    raw = await raw_rankings(engine, writer, STORES[key].format(d=work), folder, texts)
                    kept.write_bytes(pickle.dumps(raw))
                for label, nd, ki in evaluate(raw, texts, judged, [d for d, _ in pairs]):
                    table.setdefault(label, {})[NAMES[key]] = (nd, ki)
                print(f"{key} done", file=sys.stderr, flush=True)
    stores = [NAMES[k] for k in args.stores.split(",")]
    print("| setting | " + " | ".join(f"{s} nDCG@10 | {s} known-item" for s in stores) + " | mean nDCG@10 |")
    for label, per in sorted(table.items(), key=lambda kv: -np.mean([v[0] for v in kv[1].values()])):
        cells = " | ".join(f"{per[s][0]:.3f} | {per[s][1]:.3f}" for s in stores)
        print(f"| {label} | {cells} | {np.mean([v[0] for v in per.values()]):.3f} |")


if __name__ == "__main__":
    asyncio.run(main())
