"""Encode throughput: sentence-transformers vs shoal in-process vs shoal over HTTP, same corpus, same run.

MiniLM-L6 (all-MiniLM-L6-v2), fp32, CPU threads fixed. Prints a table of passages/s and tokens/s with
ratios against sentence-transformers measured in this run, plus the mean cosine between shoal's and
sentence-transformers' vectors; writes the figures as JSON to bench/results/encode_throughput.json.

    .venv/bin/python bench/encode_throughput.py [--threads 2] [--limit N] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench import load_corpus  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def best_of(repeat: int, fn) -> tuple[float, object]:  # noqa: ANN001
    """Fastest of `repeat` timed runs (after one untimed warm-up on a slice), and the last output."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run_sentence_transformers(texts: list[str], repeat: int) -> tuple[float, np.ndarray]:
    from sentence_transformers import SentenceTransformer

    from tests.helpers import minilm_dir

    st = SentenceTransformer(str(minilm_dir()), device="cpu")
    st.encode(texts[:64], batch_size=32)
    return best_of(repeat, lambda: st.encode(texts, batch_size=32, convert_to_numpy=True))


def run_in_process(texts: list[str], repeat: int, threads: int) -> tuple[float, np.ndarray]:
    import shoal

    with shoal.Engine(threads=threads, max_items=len(texts)) as engine:
        engine.encode(MODEL, texts[:64])
        secs, results = best_of(repeat, lambda: engine.encode(MODEL, texts))
    return secs, np.stack([r["dense"] for r in results])


async def _http_pass(url: str, texts: list[str], clients: int, batch: int) -> np.ndarray:
    import shoal

    chunks = [(i, texts[i : i + batch]) for i in range(0, len(texts), batch)]
    out: list[np.ndarray | None] = [None] * len(chunks)
    it = iter(range(len(chunks)))

    async def client_loop() -> None:
        async with shoal.AsyncClient(url) as client:
            for k in it:
                res = await client.encode(MODEL, chunks[k][1])
                out[k] = np.stack([r["dense"] for r in res])

    await asyncio.gather(*(client_loop() for _ in range(clients)))
    return np.concatenate(out)  # type: ignore[arg-type]


def run_http(texts: list[str], repeat: int, threads: int) -> tuple[float, np.ndarray]:
    from tests.helpers import LiveServer

    srv = LiveServer(env={"SHOAL_THREADS": str(threads)}).wait_ready()
    try:
        asyncio.run(_http_pass(srv.url, texts[:64], 4, 32))
        return best_of(repeat, lambda: asyncio.run(_http_pass(srv.url, texts, 4, 32)))
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="use only the first N passages")
    ap.add_argument("--repeat", type=int, default=2, help="timed runs per system; the best counts")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from engine.model.tokenizer import tokenizer_for

    texts = load_corpus(args.limit)
    tokens = sum(map(len, tokenizer_for(MODEL)(texts, truncate=True)))
    st_s, st_vecs = run_sentence_transformers(texts, args.repeat)
    ip_s, ip_vecs = run_in_process(texts, args.repeat, args.threads)
    http_s, http_vecs = run_http(texts, args.repeat, args.threads)

    cos_ip = float(np.mean(np.sum(st_vecs * ip_vecs, axis=1)))
    cos_http = float(np.mean(np.sum(st_vecs * http_vecs, axis=1)))
    rows = [
        ("sentence-transformers encode(batch_size=32)", st_s),
        ("shoal in-process Engine", ip_s),
        ("shoal HTTP (4 clients x batches of 32)", http_s),
    ]
    print(
        f"\n{len(texts)} passages, {tokens} real tokens, MiniLM-L6 fp32, {args.threads} threads, best of {args.repeat}"
    )
    print(f"{'system':<46} {'passages/s':>11} {'tokens/s':>10} {'vs ST':>7}")
    for name, secs in rows:
        print(f"{name:<46} {len(texts) / secs:>11.1f} {tokens / secs:>10.0f} {st_s / secs:>6.2f}x")
    print(f"mean cosine shoal vs sentence-transformers: in-process {cos_ip:.6f}, HTTP {cos_http:.6f}")

    result = {
        "passages": len(texts),
        "tokens": tokens,
        "threads": args.threads,
        "seconds": {"sentence_transformers": st_s, "in_process": ip_s, "http": http_s},
        "ratio_vs_st": {"in_process": st_s / ip_s, "http": st_s / http_s},
        "mean_cosine": {"in_process": cos_ip, "http": cos_http},
    }
    out = ROOT / "bench" / "results" / "encode_throughput.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
