"""Ingest peak resident memory against file size: one generated text file of 1, 30 (and 300) MB per run.

Each size runs in a fresh child process with a stand-in engine that answers every encode at once (a
constant vector), so what is measured is the pipeline's own share (read, parse, chunk, the window of
vectors and rows, the store writes): the model's memory is the same at any file size and is left out.
The baseline is the child's RSS after a warm-up ingest of a small file; the peak is sampled every 10 ms.
The goal printed beside each figure: at most 1 GB above the baseline at any size, so a bound that does
not grow with the file.

    .venv/bin/python -m bench.ingest_memory            # 1 and 30 MB
    .venv/bin/python -m bench.ingest_memory --sizes 1 30 300
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_MB = 1024
MODEL = "sentence-transformers/all-MiniLM-L6-v2"

CHILD = """
import json, sys, threading, time
import numpy as np
from pipeline import ingest
from pipeline.config import PipelineConfig

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

class Instant:
    '''A stand-in engine that answers at once: what is measured is the pipeline (parse, chunk, write).'''
    @property
    def aio(self):
        return self
    async def tokenizer(self, model):
        from engine.model.tokenizer import tokenizer_for
        return tokenizer_for(model)
    async def models(self):
        return [{"name": sys.argv[3], "tasks": ["encode"], "outputs": ["dense"], "dims": {"dense": 384},
                 "max_sequence_length": 256}]
    async def encode(self, model, items, **kw):
        return [{"dense": np.full(384, 0.05, dtype=np.float32)} for _ in items]

peak = [0]
def watch():
    while True:
        peak[0] = max(peak[0], rss())
        time.sleep(0.01)

source = {"max_file_mb": 100_000}
ingest(sys.argv[4], PipelineConfig(db="lancedb://" + sys.argv[2] + "-warm", source=source), client=Instant())
base = rss()
threading.Thread(target=watch, daemon=True).start()
t0 = time.perf_counter()
s = ingest(sys.argv[1], PipelineConfig(db="lancedb://" + sys.argv[2], source=source), client=Instant())
print(json.dumps({"base": base, "peak": max(peak[0], rss()), "chunks": s.chunks_written,
                  "failed": [f.reason for f in s.files_failed], "wall_s": time.perf_counter() - t0}))
"""


def write_text(path: Path, mb: float, seed: int = 7) -> int:
    """About `mb` MB of paragraphs of generated sentences, written a paragraph at a time."""
    from tests.corpus import sentence

    rng = random.Random(seed)
    size, target = 0, int(mb * 1_000_000)
    with path.open("w") as f:
        while size < target:
            para = " ".join(sentence(rng) for _ in range(rng.randint(3, 7))) + "\n\n"
            f.write(para)
            size += len(para)
    return path.stat().st_size


def measure(mb: float, work: Path, code_root: Path = ROOT) -> dict[str, float]:
    docs, warm = work / f"docs-{mb}", work / "warm"
    docs.mkdir(parents=True)
    warm.mkdir(exist_ok=True)
    (warm / "a.txt").write_text("A short text to warm up the imports.\n")
    size = write_text(docs / "big.txt", mb)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(code_root)}
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(docs), str(work / f"db-{mb}"), MODEL, str(warm)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    m = json.loads(r.stdout.strip().splitlines()[-1])
    above = (m["peak"] - m["base"]) / 2**20
    return {"file_mb": round(size / 1e6, 1), "chunks": m["chunks"], "base_mb": round(m["base"] / 2**20),
            "peak_above_base_mb": round(above), "goal_mb": GOAL_MB, "wall_s": round(m["wall_s"], 1),
            "failed": len(m["failed"])}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1, 30])
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose pipeline is measured")
    args = ap.parse_args()
    print(f"{'file MB':>8}{'chunks':>9}{'base MB':>9}{'peak above base MB':>20}{'goal MB':>9}{'wall s':>8}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="shoal-ingest-memory-") as tmp:
        for mb in args.sizes:
            t0 = time.perf_counter()
            row = measure(mb, Path(tmp), args.code)
            rows.append(row)
            ok = "ok" if row["peak_above_base_mb"] <= GOAL_MB and not row["failed"] else "OVER"
            print(
                f"{row['file_mb']:>8}{row['chunks']:>9}{row['base_mb']:>9}{row['peak_above_base_mb']:>20}"
                f"{row['goal_mb']:>9}{row['wall_s']:>8}  {ok}  ({time.perf_counter() - t0:.0f} s in all)",
                flush=True,
            )
    out = ROOT / "bench" / "results" / "ingest_memory.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
