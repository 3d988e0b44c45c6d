"""Ingest throughput: the pipeline (overlapped parse / embed / write) vs a plain sequential loop.

A generated folder of N documents (a quarter each PDF, Markdown, HTML, text; 200 by default) goes into a
fresh embedded LanceDB with the default model (all-MiniLM-L6-v2), once through `pipeline.ingest` and once
through a sequential parse -> chunk -> embed -> write loop over the same parser, chunker, engine and
connector. Prints pages/s and chunks/s with the share of time in parse / embed / write, plus an unchanged
re-run; writes the figures as JSON to bench/results/ingest.json.

    .venv/bin/python bench/ingest.py [--docs 200] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def pages_of(folder: Path) -> int:
    """PDF pages, plus one page per non-PDF document."""
    import pymupdf

    total = 0
    for f in folder.iterdir():
        if f.suffix == ".pdf":
            with pymupdf.open(f) as d:
                total += d.page_count
        else:
            total += 1
    return total


def run_pipeline(folder: Path, db: Path, engine) -> dict:  # noqa: ANN001
    from pipeline import PipelineConfig, ingest

    cfg = PipelineConfig(db=f"lancedb://{db}")
    t0 = time.perf_counter()
    s = ingest(folder, cfg, client=engine)
    wall = time.perf_counter() - t0
    assert s.ok, s.files_failed
    t0 = time.perf_counter()
    again = ingest(folder, cfg, client=engine)
    rerun = time.perf_counter() - t0
    assert again.chunks_embedded == 0
    return {"wall_s": wall, "chunks": s.chunks_written, "parse_s": s.parse_s, "embed_s": s.embed_s,
            "write_s": s.write_s, "unchanged_rerun_s": rerun}  # fmt: skip


def run_sequential(folder: Path, db: Path, engine) -> dict:  # noqa: ANN001
    """The baseline: one file at a time, parse, chunk, embed, write; no overlap, no batching across files."""
    from connectors.base import CollectionSpec, open_store
    from engine.model.tokenizer import tokenizer_for
    from pipeline.chunking import Chunker
    from pipeline.config import ChunkConfig
    from pipeline.parsers import parse

    tok = tokenizer_for(MODEL)
    chunker = Chunker(tok.tokenizer, tok.max_len, ChunkConfig())
    store = open_store(f"lancedb://{db}")
    store.ensure_collection(CollectionSpec("chunks", 384))
    times = {"parse_s": 0.0, "embed_s": 0.0, "write_s": 0.0}
    chunks = 0
    t0 = time.perf_counter()
    for f in sorted(folder.iterdir()):
        t = time.perf_counter()
        doc = parse(f.read_bytes(), f.name)
        cs = chunker.chunk(doc, str(f))
        times["parse_s"] += time.perf_counter() - t
        t = time.perf_counter()
        vecs = engine.encode(MODEL, [c.embed_text for c in cs])
        times["embed_s"] += time.perf_counter() - t
        t = time.perf_counter()
        rows = [{"id": c.id, "text": c.text, "root": str(folder), "source": f.name, "chunk_index": c.index,
                 "vector": v["dense"]} for c, v in zip(cs, vecs, strict=True)]  # fmt: skip
        store.upsert("chunks", rows)
        times["write_s"] += time.perf_counter() - t
        chunks += len(cs)
    t = time.perf_counter()
    store.finalize("chunks")
    times["write_s"] += time.perf_counter() - t
    return {"wall_s": time.perf_counter() - t0, "chunks": chunks, **times}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ingest.json")
    args = ap.parse_args()

    import shoal
    from pipeline.corpus import make_corpus

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        make_corpus(folder, args.docs, seed=1)
        pages = pages_of(folder)
        with shoal.Engine(threads=args.threads) as engine:
            engine.encode(MODEL, ["warm up the model"] * 8)
            base = run_sequential(folder, Path(tmp) / "seq", engine)
            pipe = run_pipeline(folder, Path(tmp) / "pipe", engine)

    rows = []
    for name, r in (("sequential loop", base), ("pipeline.ingest", pipe)):
        busy = r["wall_s"]
        rows.append({
            "mode": name, "docs": args.docs, "pages": pages, "chunks": r["chunks"], "wall_s": round(r["wall_s"], 2),
            "pages_per_s": round(pages / r["wall_s"], 1), "chunks_per_s": round(r["chunks"] / r["wall_s"], 1),
            "share_parse": round(r["parse_s"] / busy, 3), "share_embed": round(r["embed_s"] / busy, 3),
            "share_write": round(r["write_s"] / busy, 3),
        })  # fmt: skip
    rows[1]["unchanged_rerun_s"] = round(pipe["unchanged_rerun_s"], 2)
    head = f"{'mode':<18}{'docs':>6}{'pages':>7}{'chunks':>8}{'wall s':>8}{'pages/s':>9}{'chunks/s':>10}  parse/embed/write"
    print(head)
    for r in rows:
        shares = f"{r['share_parse']:.0%}/{r['share_embed']:.0%}/{r['share_write']:.0%}"
        print(f"{r['mode']:<18}{r['docs']:>6}{r['pages']:>7}{r['chunks']:>8}{r['wall_s']:>8}{r['pages_per_s']:>9}"
              f"{r['chunks_per_s']:>10}  {shares}")  # fmt: skip
    print(f"speed-up {base['wall_s'] / pipe['wall_s']:.2f}x; unchanged re-run {pipe['unchanged_rerun_s']:.2f}s")
    print(
        "(share = seconds a stage was active / wall time; the pipeline's stages overlap, so its shares add past 100%)"
    )
    import platform

    import torch

    result = {"rows": rows, "speedup": round(base["wall_s"] / pipe["wall_s"], 2), "model": MODEL,
              "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine()}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
