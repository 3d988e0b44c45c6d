"""Ingest: parser and chunker scaling (MB/s at 0.2, 2 and 20 MB), and throughput against two baselines.

1. Scaling (bench/ingest_scaling.py): one generated document per type (text, Markdown, HTML, PDF) and size,
   parsed and chunked; MB/s per size and the cost ratio largest/smallest (linear: about the size ratio).
2. Throughput: a generated folder of N documents (a quarter each PDF, Markdown, HTML, text; 200 by default)
   goes into a fresh embedded LanceDB with the default model (all-MiniLM-L6-v2) three ways: a plain
   sequential parse -> chunk -> embed -> write loop over shoal's parser, chunker, engine and connector;
   `pipeline.ingest` (overlapped stages); and a peer's pipeline, LlamaIndex's IngestionPipeline
   (bench/llamaindex_baseline.py, in a subprocess: SimpleDirectoryReader, SentenceSplitter at the same
   200/32 MiniLM tokens, HuggingFaceEmbedding of the same MiniLM from the local package folder, LanceDB).
   Prints pages/s and chunks/s for each, with the share of time in parse / embed / write.

Figures go to bench/results/ingest.json. The LlamaIndex baseline needs `pip install -e .[bench]`; with
`--llamaindex-python PATH` it runs under another venv's python instead (it only needs llama-index, the
MiniLM package and torch there). Without either it is reported as skipped.

Every run ends with one `ingest chunks/s:` line for `pipeline.ingest`, naming the checkout and its commit.
`--against REV` first runs the same throughput comparison from a temporary checkout of REV (a detached git
worktree, removed afterwards; same interpreter, same arguments) and prints its line next to this checkout's:
the before and after of a change in one run. `--docs 24 --no-scaling --no-llamaindex` takes a few minutes.

    .venv/bin/python bench/ingest.py [--docs 200] [--threads N] [--sizes 0.2,2,20] [--no-scaling]
    .venv/bin/python bench/ingest.py --against main --docs 24 --no-scaling --no-llamaindex
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
    from connectors import CollectionSpec, open_store
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


def run_llamaindex(folder: Path, db: Path, threads: int | None, python: str) -> dict:
    """The peer baseline in its own process; {"skipped": reason} when llama-index is not installed there."""
    cmd = [python, str(ROOT / "bench" / "llamaindex_baseline.py"), str(folder), str(db)]
    cmd += ["--threads", str(threads)] if threads else []
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"skipped": f"exit {proc.returncode}: {tail}"}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**r, "parse_s": r["read_s"]}  # its stages run one after another: only reading is timed apart


def scaling(sizes: list[float]) -> dict:
    from bench.ingest_scaling import HEADER, cost_ratios, measure
    from engine.model.tokenizer import tokenizer_for
    from pipeline.chunking import Chunker
    from pipeline.config import ChunkConfig

    tok = tokenizer_for(MODEL)
    chunker = Chunker(tok.tokenizer, tok.max_len, ChunkConfig())
    print("scaling: CPU seconds; parse MB/s over the file's bytes, chunk MB/s over the extracted text")
    print(HEADER)
    rows = measure(sizes, chunker)
    ratios = cost_ratios(rows)
    for kind, r in ratios.items():
        print(f"{kind:<9} {r['size_ratio']:g}x the bytes cost {r['parse_cost_ratio']:g}x to parse, "
              f"{r['chunk_cost_ratio']:g}x to chunk (linear: about {r['size_ratio']:g}x)")  # fmt: skip
    return {"rows": rows, "cost_ratios": ratios}


def throughput_rows(docs: int, pages: int, runs: dict[str, dict]) -> list[dict]:
    rows = []
    for name, r in runs.items():
        if "skipped" in r:
            rows.append({"mode": name, "skipped": r["skipped"]})
            continue
        wall = r["wall_s"]
        shares = {f"share_{k}": round(r[f"{k}_s"] / wall, 3) for k in ("parse", "embed", "write") if f"{k}_s" in r}
        rows.append({
            "mode": name, "docs": docs, "pages": pages, "chunks": r["chunks"], "wall_s": round(wall, 2),
            "pages_per_s": round(pages / wall, 1), "chunks_per_s": round(r["chunks"] / wall, 1), **shares,
        })  # fmt: skip
    return rows


def print_throughput(rows: list[dict]) -> None:
    print(
        f"{'mode':<24}{'docs':>6}{'pages':>7}{'chunks':>8}{'wall s':>8}{'pages/s':>9}{'chunks/s':>10}  parse/embed/write"
    )
    for r in rows:
        if "skipped" in r:
            print(f"{r['mode']:<24}skipped: {r['skipped']}")
            continue
        shares = "/".join(f"{r[k]:.0%}" if k in r else "-" for k in ("share_parse", "share_embed", "share_write"))
        print(f"{r['mode']:<24}{r['docs']:>6}{r['pages']:>7}{r['chunks']:>8}{r['wall_s']:>8}{r['pages_per_s']:>9}"
              f"{r['chunks_per_s']:>10}  {shares}")  # fmt: skip
    print("(share = seconds a stage was active / wall time; the pipeline's stages overlap, so its shares add past")
    print(" 100%; LlamaIndex reports only its read share. Its splitter also counts metadata into chunk_size.)")


def revision(root: Path) -> str:
    """The checkout's commit (short), with `+changes` when its tracked files differ from it."""
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD"], capture_output=True).returncode
    return (head.stdout.strip() or "unknown") + ("+changes" if dirty else "")


def chunks_line(result: dict, root: Path) -> str:
    """The one line to compare runs by: pipeline.ingest's chunks/s, with the checkout it ran."""
    row = next((r for r in result.get("rows", []) if r.get("mode") == "shoal pipeline.ingest"), None)
    if row is None:
        return f"ingest chunks/s: no pipeline run ({root} @ {revision(root)})"
    return (
        f"ingest chunks/s: {row['chunks_per_s']:>8} chunks/s  ({row['chunks']} chunks, {row['wall_s']} s wall, "
        f"{row['docs']} docs; {root} @ {revision(root)})"
    )


def run_against(rev: str, argv: list[str], tmp: Path) -> str:
    """This benchmark's throughput part run from a temporary checkout of `rev`; its chunks/s line."""
    checkout, out = tmp / "checkout", tmp / "against.json"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(checkout), rev], check=True)
    try:
        cmd = [sys.executable, str(checkout / "bench" / "ingest.py"), *argv, "--no-scaling", "--out", str(out)]
        subprocess.run(cmd, check=True, cwd=checkout)
        return chunks_line(json.loads(out.read_text()), checkout).replace(str(checkout), f"{rev} (temporary checkout)")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(checkout)], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--sizes", default="0.2,2,20", help="scaling document sizes in MB, comma-separated")
    ap.add_argument("--no-scaling", action="store_true", help="only the throughput comparison")
    ap.add_argument("--no-throughput", action="store_true", help="only the scaling benchmark")
    ap.add_argument("--llamaindex-python", default=sys.executable, help="python of a venv with llama-index")
    ap.add_argument("--no-llamaindex", action="store_true", help="leave the LlamaIndex baseline out")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ingest.json")
    ap.add_argument("--against", metavar="REV", help="first run the throughput part from a checkout of REV")
    args = ap.parse_args()
    against = None
    if args.against:
        passed = ["--docs", str(args.docs), *(["--threads", str(args.threads)] if args.threads else [])]
        passed += ["--no-llamaindex"] if args.no_llamaindex else ["--llamaindex-python", args.llamaindex_python]
        with tempfile.TemporaryDirectory() as tmp:
            against = run_against(args.against, passed, Path(tmp))
    import platform

    import torch

    result: dict = {"model": MODEL, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    if not args.no_scaling:
        result["scaling"] = scaling([float(x) for x in args.sizes.split(",")])
    if not args.no_throughput:
        import shoal
        from tests.corpus import make_corpus

        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "docs"
            make_corpus(folder, args.docs, seed=1)
            pages = pages_of(folder)
            runs: dict[str, dict] = {}
            with shoal.Engine(threads=args.threads) as engine:
                engine.encode(MODEL, ["warm up the model"] * 8)
                runs["sequential loop"] = run_sequential(folder, Path(tmp) / "seq", engine)
                runs["shoal pipeline.ingest"] = run_pipeline(folder, Path(tmp) / "pipe", engine)
                result["threads"] = torch.get_num_threads()
            if not args.no_llamaindex:
                li = run_llamaindex(folder, Path(tmp) / "llama", args.threads, args.llamaindex_python)
                runs["LlamaIndex Ingestion"] = li
        rows = throughput_rows(args.docs, pages, runs)
        print_throughput(rows)
        base, pipe = runs["sequential loop"], runs["shoal pipeline.ingest"]
        print(f"shoal speed-up over the loop {base['wall_s'] / pipe['wall_s']:.2f}x; unchanged re-run "
              f"{pipe['unchanged_rerun_s']:.2f}s")  # fmt: skip
        result.update(rows=rows, speedup=round(base["wall_s"] / pipe["wall_s"], 2))
        result["unchanged_rerun_s"] = round(pipe["unchanged_rerun_s"], 2)
        li = runs.get("LlamaIndex Ingestion", {})
        if "wall_s" in li:
            print(f"shoal vs LlamaIndex: {li['wall_s'] / pipe['wall_s']:.2f}x the pages/s")
            result["vs_llamaindex"] = round(li["wall_s"] / pipe["wall_s"], 2)
            result["llamaindex"] = {k: li[k] for k in ("llama_index", "threads", "documents", "rows")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    if not args.no_throughput:
        if against:
            print(against)
        print(chunks_line(result, ROOT))


if __name__ == "__main__":
    main()
