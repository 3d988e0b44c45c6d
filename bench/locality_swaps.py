"""Workers that find their work: model swaps per 1,000 requests with and without locality-aware pulling.

Three `shoal worker` processes pull from a three-node NATS JetStream cluster (work stream with 3 replicas);
each worker's device budget holds about two of six tiny random BERT models, and its host tier about one. The
same seeded, skewed (Zipf) stream of single-text requests goes through one gateway from C concurrent clients,
once with SHOAL_QUEUE_LOCALITY=true (a worker pulls its resident models' tasks first) and once with false (the
fullest subject first, a plain shared queue). A swap is a model brought onto a worker's device that was not
there, counted as the models moved off a worker's device to make room (`shoal_evictions_total` with
from_tier="device"); first loads from disk are counted apart. Throughput is measured in the same run. Writes bench/results/locality_swaps.json.

    .venv/bin/python bench/locality_swaps.py [--requests 600] [--clients 8] [--skew 1.2]
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

OUT = ROOT / "bench" / "results" / "locality_swaps.json"
MODELS, WORKERS = 6, 3


def make_models(base: Path) -> tuple[list[str], int]:
    """Six tiny BERT folders and a device budget that holds about two of them."""
    import torch

    from engine.residency.footprint import estimate
    from tests.helpers import make_tiny_bert

    folders = [make_tiny_bert(base / f"tiny-{i}", seed=i) for i in range(MODELS)]
    weights, reserve = estimate(folders[0], 8192, 64, torch.float32)
    return [str(f) for f in folders], int(2.2 * (weights + reserve))


def stream(models: list[str], n: int, skew: float, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    weights = [1 / (r + 1) ** skew for r in range(len(models))]
    return rng.choices(models, weights=weights, k=n)


async def drive(url: str, picks: list[str], clients: int) -> tuple[float, int]:
    import httpx

    from engine.wire import packb

    errors = 0
    todo = list(enumerate(picks))

    async def client() -> None:
        nonlocal errors
        async with httpx.AsyncClient(timeout=120) as http:
            while todo:
                i, model = todo.pop()
                body = packb({"items": [{"text": f"request {i} about the harbour"}]})
                for _ in range(20):
                    r = await http.post(
                        f"{url}/v1/encode/{model}", content=body, headers={"Content-Type": "application/msgpack"}
                    )  # noqa: E501
                    if r.status_code not in (503, 504):
                        break
                    await asyncio.sleep(float(r.headers.get("Retry-After", 0.5)))
                errors += r.status_code != 200

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return time.perf_counter() - t, errors


def device_evictions(port: int) -> float:
    """Models moved off a worker's device (each one made room for a model the worker did not hold)."""
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    lines = [x for x in text.splitlines() if x.startswith("shoal_evictions_total{") and 'from_tier="device"' in x]
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines)


def one_run(locality: bool, models: list[str], budget: int, picks: list[str], clients: int, tmp: Path) -> dict:
    from tests.nats_support import NatsCluster, WorkerProc, gateway

    env = {
        "SHOAL_LOCAL_MODELS": "1", "SHOAL_QUEUE_REPLICAS": "3", "SHOAL_QUEUE_LOCALITY": str(locality).lower(),
        "SHOAL_DEVICE_BUDGET": str(budget), "SHOAL_HOST_BUDGET": str(budget // 2),
    }  # fmt: skip
    cluster = NatsCluster(tmp / f"nats-{locality}").start()
    workers = [WorkerProc(cluster.url, env=env) for _ in range(WORKERS)]
    gw = None
    try:
        for w in workers:
            w.wait_ready()
        gw = gateway(cluster.url, env=env)
        wall, errors = asyncio.run(drive(gw.url, picks, clients))
        loads = sum(w.metric("shoal_model_loads_total") for w in workers)
        evictions = sum(device_evictions(w.metrics_port) for w in workers)
        pulled = sum(w.metric("shoal_queue_pulled_total") for w in workers)
    finally:
        for p in (gw, *workers):
            if p is not None:
                p.stop()
        cluster.stop()
    n = len(picks)
    return {
        "locality": locality, "requests": n, "errors": errors, "req_per_s": n / wall, "loads": loads,
        "swaps": evictions, "pulled": pulled, "loads_per_1000": 1000 * loads / n,
        "evictions_per_1000": 1000 * evictions / n,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--skew", type=float, default=1.2, help="Zipf exponent over the six models")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        models, budget = make_models(tmp / "models")
        picks = stream(models, args.requests, args.skew)
        share = [round(picks.count(m) / len(picks), 3) for m in models]
        runs = [one_run(loc, models, budget, picks, args.clients, tmp) for loc in (True, False)]
    print(f"\n{WORKERS} workers, {MODELS} models (request shares {share}), device budget {budget} B each (~2 models)")
    print(f"{'pulling':22s} {'req/s':>7s} {'errors':>6s} {'disk loads/1000':>15s} {'swaps/1000':>10s}")
    for r in runs:
        name = "locality-aware" if r["locality"] else "fullest subject first"
        print(
            f"{name:22s} {r['req_per_s']:7.1f} {r['errors']:6d} {r['loads_per_1000']:10.1f} {r['evictions_per_1000']:14.1f}"
        )  # noqa: E501
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"shares": share, "budget": budget, "clients": args.clients, "runs": runs}, indent=2))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
