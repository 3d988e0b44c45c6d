"""Agent tools: taxonomy classification and context-filter latency.

Taxonomy, on the example product taxonomy (401 nodes, 302 leaves, 335 labelled texts) and on a generated
tree (--big-leaves, 5,000 by default), embeddings by all-MiniLM-L6-v2 in fp32 on CPU:
  - the index build (every node embedded once), its resident size (the arrays it holds);
  - texts/s end to end (one encode of the texts, then the scorer over the cached node vectors), and ms per
    text of the scorer and answer alone (in batches);
  - with a cross-encoder rescoring the best 10 leaves: a random-weight cross-encoder of ms-marco-MiniLM-L-6
    size (bench/crossencoder.py), so its speed is real and its scores meaningless.
Context filter: latency of filter_context for 50 passages (MiniLM similarity; with sentence pruning; with the
cross-encoder), against the bare model call on the same texts (the baseline, measured in the same run).
Scaling: taxonomy parsing per node at 1k/10k/50k leaves and passage splitting per MB at 0.1/1/5 MB.
Quality (unless --no-quality): bench/taxonomy_quality.py on the five labelled taxonomy sets, the flat
nearest-leaf baseline beside the tool per set, and bench/context_quality.py on the three question sets.
Writes bench/results/agent_tools.json.

    .venv/bin/python bench/agent_tools.py [--threads 2] [--texts 335] [--ce-texts 4] [--big-leaves 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
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

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
EXAMPLES = ROOT / "examples"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def timed(coro: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = await coro
    return out, time.perf_counter() - t0


async def bench_taxonomy(
    name: str, taxonomy: Any, texts: list[str], gold: list[str] | None, engine: Any, ce: str, ce_texts: int
) -> dict[str, Any]:
    """One taxonomy: index build, throughput end to end and of the scorer alone, the index's memory,
    accuracy, cross-encoder calls."""
    import tracemalloc

    from agent_tools.backend import ModelBackend
    from agent_tools.taxonomy import ClassifyOptions
    from agent_tools.taxonomy.classify import answer_chunks, classify
    from agent_tools.taxonomy.index import IndexCache

    cache = IndexCache()
    backend = ModelBackend(engine)
    tracemalloc.start()
    index, build_s = await timed(cache.get(taxonomy, backend, MINILM))
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    opts = ClassifyOptions()
    queries, encode_s = await timed(ModelBackend(engine).embed(MINILM, texts, is_query=True))
    t0 = time.perf_counter()
    answers = answer_chunks(index, list(queries), opts)
    score_s = time.perf_counter() - t0
    b = ModelBackend(engine)
    _, seconds = await timed(classify(texts, taxonomy, b, MINILM, opts, cache))
    row: dict[str, Any] = {
        "taxonomy": name,
        "nodes": len(taxonomy),
        "leaves": int(index.leaves.size),
        "texts": len(texts),
        "index_build_s": build_s,
        "index_encode_items": backend.calls.encode_items,
        "index_mb": index.nbytes / 1e6,
        "index_build_traced_mb": traced / 1e6,
        "encode_texts_s": encode_s,
        "texts_per_s": len(texts) / seconds,
        "encode_items_per_text": b.calls.encode_items / len(texts),
        "score_ms_per_text": score_s / len(texts) * 1000,
    }
    if gold:
        row["top1_leaf_accuracy"] = float(
            np.mean([a["best_leaf"]["label"] == g for a, g in zip(answers, gold, strict=True)])
        )
    sample = texts[:ce_texts]
    b = ModelBackend(engine)
    _, seconds = await timed(
        classify(sample, taxonomy, b, MINILM, ClassifyOptions(rerank_model=ce, rerank_top=10), cache)
    )
    row["rerank"] = {"texts_per_s": len(sample) / seconds, "score_pairs_per_text": b.calls.score_pairs / len(sample)}
    return row


async def bench_filter(engine: Any, ce: str, repeat: int) -> dict[str, Any]:
    """filter_context over 50 passages vs the bare model call over the same 51 texts."""
    from agent_tools.backend import ModelBackend
    from agent_tools.context_filter import FilterOptions, filter_context

    docs = json.loads((EXAMPLES / "context_filter" / "documents.json").read_text())["documents"]
    passages = [p for d in docs for p in d["passages"]][:50]
    questions = [q["question"] for q in read_jsonl(EXAMPLES / "context_filter" / "questions.jsonl")][:repeat]

    async def latency(make: Any) -> float:
        times = []
        for q in questions:
            _, s = await timed(make(q))
            times.append(s)
        return statistics.median(times) * 1000

    b = ModelBackend(engine)
    row = {"passages": len(passages), "calls": len(questions)}
    row["encode_baseline_ms"] = await latency(lambda q: b.embed(MINILM, [q, *passages]))
    row["filter_ms"] = await latency(
        lambda q: filter_context(q, passages, None, ModelBackend(engine), MINILM, FilterOptions())
    )
    opts = FilterOptions(sentences=True)
    row["filter_sentences_ms"] = await latency(
        lambda q: filter_context(q, passages, None, ModelBackend(engine), MINILM, opts)
    )
    row["score_baseline_ms"] = await latency(lambda q: b.score(ce, q, passages))
    opts = FilterOptions(rerank_model=ce)
    row["filter_reranker_ms"] = await latency(
        lambda q: filter_context(q, passages, None, ModelBackend(engine), MINILM, opts)
    )
    return row


def bench_scaling() -> dict[str, Any]:
    """Input paths stay linear: seconds per node of taxonomy parsing, per MB of passage splitting."""
    from agent_tools.taxonomy.tree import build_taxonomy
    from agent_tools.text import split_passages
    from tests.agent_tools_support import generated_tree

    parse = {}
    for departments in (5, 50, 250):  # x 10 categories x 20 leaves: 1k, 10k, 50k leaves
        tree = generated_tree(departments, 10, 20)
        t0 = time.perf_counter()
        t = build_taxonomy(tree)
        parse[len(t.leaves)] = (time.perf_counter() - t0) / len(t) * 1e6
    docs = json.loads((EXAMPLES / "context_filter" / "documents.json").read_text())["documents"]
    base = "\n\n".join(p for d in docs for p in d["passages"])
    split = {}
    for mb in (0.1, 1.0, 5.0):
        text = (base + "\n\n") * int(mb * 1e6 / (len(base) + 2) + 1)
        t0 = time.perf_counter()
        split_passages(text)
        split[mb] = (time.perf_counter() - t0) / (len(text) / 1e6)
    return {"parse_us_per_node": parse, "split_s_per_mb": split}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import agent_tools
    from bench.crossencoder import MODEL_ID, make_model
    from shoal import AsyncEngine, EngineSettings
    from tests.agent_tools_support import generated_tree

    data = read_jsonl(EXAMPLES / "taxonomy" / "labelled.jsonl")[: args.texts]
    products = agent_tools.load_taxonomy(EXAMPLES / "taxonomy" / "products.yaml")
    big = agent_tools.build_taxonomy(generated_tree(max(1, args.big_leaves // 500), 25, 20))
    big_texts = [big.names[int(i)] + " for sale" for i in np.linspace(1, len(big) - 1, 200).astype(int)]
    with tempfile.TemporaryDirectory() as tmp:
        make_model(Path(tmp))
        settings = EngineSettings(model_dir=Path(tmp) / "cards", offline=True, threads=args.threads)
        async with AsyncEngine(settings) as engine:
            await engine.encode(MINILM, ["warm up"])
            await engine.score(MODEL_ID, "warm up", ["a"])
            rows = [
                await bench_taxonomy(
                    "example (products.yaml)",
                    products,
                    [d["text"] for d in data],
                    [d["label"] for d in data],
                    engine,
                    MODEL_ID,
                    args.ce_texts,
                ),
                await bench_taxonomy(
                    f"generated {len(big.leaves):,}-leaf tree", big, big_texts, None, engine, MODEL_ID, args.ce_texts
                ),
            ]
            filt = await bench_filter(engine, MODEL_ID, args.filter_calls)
    out = {"threads": args.threads, "taxonomy": rows, "filter": filt, "scaling": bench_scaling()}
    if args.quality:
        from bench import context_quality, taxonomy_quality

        out["taxonomy_quality"] = await taxonomy_quality.run(list(taxonomy_quality.SETS), [1], 1)
        out["context_quality"] = await context_quality.run()
    return out


def report(result: dict[str, Any]) -> None:
    print(f"taxonomy classification, MiniLM fp32, {result['threads']} CPU threads (every leaf scored)")
    for r in result["taxonomy"]:
        acc = f", best-leaf top-1 {r['top1_leaf_accuracy']:.3f}" if "top1_leaf_accuracy" in r else ""
        print(
            f"\n{r['taxonomy']}: {r['nodes']:,} nodes, {r['leaves']:,} leaves, {r['texts']} texts;"
            f" index built once in {r['index_build_s']:.1f}s ({r['index_encode_items']:,} node texts encoded),"
            f" {r['index_mb']:.1f} MB resident ({r['index_build_traced_mb']:.1f} MB allocated by Python while built)"
        )
        print(
            f"  {r['texts_per_s']:.1f} texts/s end to end (encode included), scorer and answer alone"
            f" {r['score_ms_per_text']:.2f} ms/text{acc}; with cross-encoder rescoring of the best 10 leaves"
            f" {r['rerank']['score_pairs_per_text']:.0f} pairs/text, {r['rerank']['texts_per_s']:.2f} texts/s"
        )
    f = result["filter"]
    print(f"\ncontext filter, {f['passages']} passages, median of {f['calls']} questions:")
    print(
        f"  MiniLM similarity: {f['filter_ms']:.0f} ms (bare encode of the same 51 texts: {f['encode_baseline_ms']:.0f} ms,"
        f" {f['filter_ms'] / f['encode_baseline_ms']:.2f}x); with sentence pruning {f['filter_sentences_ms']:.0f} ms"
    )
    print(
        f"  cross-encoder: {f['filter_reranker_ms']:.0f} ms (bare score of the 50 pairs: {f['score_baseline_ms']:.0f} ms,"
        f" {f['filter_reranker_ms'] / f['score_baseline_ms']:.2f}x)"
    )
    if "taxonomy_quality" in result:
        from bench import context_quality, taxonomy_quality

        print("\ntaxonomy quality, MiniLM, default options:")
        taxonomy_quality.report(result["taxonomy_quality"])
        print("\ncontext filter quality, MiniLM:")
        context_quality.report(result["context_quality"])
    s = result["scaling"]
    print(
        "\nscaling: taxonomy parse "
        + ", ".join(f"{k:,} leaves {v:.1f} us/node" for k, v in s["parse_us_per_node"].items())
        + "; passage split "
        + ", ".join(f"{k} MB {v:.2f} s/MB" for k, v in s["split_s_per_mb"].items())
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--texts", type=int, default=335, help="labelled texts of the example taxonomy")
    ap.add_argument("--ce-texts", type=int, default=4, help="texts classified with cross-encoder rescoring")
    ap.add_argument("--big-leaves", type=int, default=5_000)
    ap.add_argument("--filter-calls", type=int, default=10)
    ap.add_argument("--no-quality", dest="quality", action="store_false", help="skip the labelled-set figures")
    args = ap.parse_args()
    result = asyncio.run(run(args))
    report(result)
    out = ROOT / "bench" / "results" / "agent_tools.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
