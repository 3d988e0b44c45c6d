"""Residency: 8 small models, a device budget that fits 3, a Zipf request stream.

Three runs over the same stream, same process: all 8 resident (baseline), tiered (device fits 3, host RAM
holds the rest: misses are host->device swap-ins), and reload-from-disk on every miss (no host tier).
Prints throughput and p50/p99 latency with ratios against the baseline measured in this run, and the
host-RAM swap-in time as a ratio of a cold disk load; writes JSON to bench/results/residency.json.

    .venv/bin/python bench/residency.py [--requests 600] [--concurrency 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "in",
    "paris",
    "while",
    "the",
    "dog",
    "ran",
    "to",
    "the",
    "river",
    "with",
    "a",
    "small",
    "red",
    "fish",
]
SMALL = dict(
    hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512, max_position_embeddings=128
)


def make_models(root: Path, n: int) -> list[str]:
    from tests.helpers import make_tiny_bert

    return [str(make_tiny_bert(root / f"model-{i}", seed=i, **SMALL)) for i in range(n)]


def zipf_stream(models: list[str], n: int, s: float, seed: int) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    weights = [1 / (k + 1) ** s for k in range(len(models))]
    order = models[:]
    rng.shuffle(order)  # popularity rank is not the load order
    stream = []
    for _ in range(n):
        model = rng.choices(order, weights)[0]
        texts = [" ".join(rng.choices(WORDS, k=rng.randint(4, 24))) for _ in range(rng.randint(1, 4))]
        stream.append((model, texts))
    return stream


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def run(name: str, models: list[str], stream: list, fits: float, host_fits: float, conc: int) -> dict:
    from engine.config import EngineSettings
    from engine.runtime import AsyncEngine
    from tests.residency_support import budget_for

    settings = EngineSettings(
        device_budget=budget_for(models[0], fits), host_budget=budget_for(models[0], host_fits), batch_wait_ms=1
    )
    async with AsyncEngine(settings) as engine:
        if fits >= len(models):
            for m in models:  # the baseline starts with everything resident
                await engine.encode(m, "warm up")
        latencies: list[float] = []
        queue = list(stream)

        async def client() -> None:
            while queue:
                model, texts = queue.pop()
                t0 = time.perf_counter()
                await engine.encode(model, texts)
                latencies.append(time.perf_counter() - t0)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(conc)))
        wall = time.perf_counter() - started
        book = engine.registry.ledger
        return {
            "run": name,
            "requests": len(stream),
            "requests_per_s": len(stream) / wall,
            "p50_ms": pct(latencies, 0.5) * 1000,
            "p99_ms": pct(latencies, 0.99) * 1000,
            "disk_loads": book.loads,
            "host_swap_ins": book.swap_ins,
            "evictions": book.evicted,
            "disk_load_ms_mean": book.seconds["disk"] / book.loads * 1000 if book.loads else None,
            "host_swap_in_ms_mean": book.seconds["host"] / book.swap_ins * 1000 if book.swap_ins else None,
            "disk_bytes_read": book.disk_bytes_read,
        }


def copy_ratio(model: str, repeat: int = 5) -> dict:
    """What a host->device copy costs where the device is not the host (CUDA): a full copy of the
    weights in memory, timed against a cold load of the same model from disk."""
    from engine.catalogue.catalogue import Catalogue
    from engine.model.loader import load_model

    card = Catalogue().get(model)
    disk, copy = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        loaded = load_model(card, "cpu", True)
        disk.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _ = {k: v.clone() for k, v in loaded.backbone.state_dict().items()}
        copy.append(time.perf_counter() - t0)
    return {"disk_load_ms": min(disk) * 1000, "memory_copy_ms": min(copy) * 1000, "ratio": min(copy) / min(disk)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        models = make_models(Path(tmp), 8)
        stream = zipf_stream(models, args.requests, args.zipf, args.seed)
        runs = [
            asyncio.run(run("all-resident", models, stream, 8.5, 8, args.concurrency)),
            asyncio.run(run("tiered (device fits 3, host RAM)", models, stream, 3.5, 8, args.concurrency)),
            asyncio.run(run("disk on every miss (device fits 3)", models, stream, 3.5, 0, args.concurrency)),
        ]
        copy = copy_ratio(models[0])
    base, tiered, disk = runs
    print(f"{'run':38} {'req/s':>8} {'x base':>7} {'p50 ms':>8} {'p99 ms':>8} {'disk':>5} {'host':>5}")
    for r in runs:
        ratio = r["requests_per_s"] / base["requests_per_s"]
        print(
            f"{r['run']:38} {r['requests_per_s']:8.1f} {ratio:7.2f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}"
            f" {r['disk_loads']:5d} {r['host_swap_ins']:5d}"
        )
    swap = tiered["host_swap_in_ms_mean"] or 0.0
    cold = tiered["disk_load_ms_mean"] or float("nan")
    summary = {
        "tiered_vs_all_resident": tiered["requests_per_s"] / base["requests_per_s"],
        "disk_every_miss_vs_all_resident": disk["requests_per_s"] / base["requests_per_s"],
        "tiered_vs_disk_every_miss": tiered["requests_per_s"] / disk["requests_per_s"],
        "host_swap_in_vs_cold_disk_load": swap / cold,
        "memory_copy_vs_cold_disk_load": copy["ratio"],
    }
    print(
        f"host-RAM swap-in {swap:.3f} ms vs cold disk load {cold:.1f} ms: ratio {summary['host_swap_in_vs_cold_disk_load']:.4f}"
    )
    print(
        f"a full in-memory copy of the weights (what CUDA's host->device swap-in does) vs a cold disk load: {copy['ratio']:.3f}"
    )
    out = ROOT / "bench" / "results" / "residency.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "zipf": args.zipf,
        "threads": args.threads,
        "models": 8,
    }
    out.write_text(json.dumps({"config": meta, "runs": runs, "copy": copy, "summary": summary}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
