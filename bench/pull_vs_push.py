"""Pull-based workers vs a push router: (a) a discrete-event SIMULATION, (b) a real run on this machine.

(a) bench/sim_pull_push.py: N simulated workers, small requests at high rate; pull from a shared queue
    vs a router pushing with worker-state snapshots refreshed every T ms (and round-robin); utilisation,
    throughput and p99 latency as T and request size vary. A model of the system, not a measurement.
(b) Real processes: `shoal serve --queue` + 2 `shoal worker` over nats-server, vs the same engine as 2
    `shoal serve` backends behind bench/push_router.py (round-robin); the same seeded request stream
    from C concurrent clients; throughput and p50/p99 latency as measured here.

    .venv/bin/python bench/pull_vs_push.py [--requests 800] [--clients 16] [--tiny] [--sim-only]
Writes bench/results/pull_vs_push.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench import load_corpus  # noqa: E402
from bench.sim_pull_push import SimConfig, simulate  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
OUT = ROOT / "bench" / "results" / "pull_vs_push.json"


def run_simulation() -> list[dict]:
    print("\n(a) DISCRETE-EVENT SIMULATION - a model, not a measurement")
    base = SimConfig()
    print(
        f"    {base.workers} workers, forward pass = {base.fixed_ms} ms + {base.per_token_us} us/token, "
        f"budget {base.budget_tokens} tokens, hop {base.hop_ms} ms, lognormal sizes (sigma {base.sigma}), "
        f"offered load {base.load:.0%} of capacity at {base.ref_batch} requests/pass, {base.requests} requests"
    )
    print(f"    {'mean tok':>8} {'policy':<22} {'util':>6} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'batch':>6}")
    rows = []
    for mean_tokens in (16, 64, 256):
        cfg = SimConfig(mean_tokens=mean_tokens)
        runs = [("pull", 0.0), ("round-robin", 0.0)] + [("jsq-snapshot", t) for t in (1.0, 5.0, 20.0, 100.0)]
        for policy, refresh in runs:
            r = simulate(cfg, policy, refresh)
            name = policy if policy != "jsq-snapshot" else f"push snapshot T={refresh:g}ms"
            print(
                f"    {mean_tokens:>8} {name:<22} {r.utilisation:>6.2f} {r.throughput_rps:>8.0f} "
                f"{r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {r.mean_batch:>6.1f}"
            )
            rows.append({"mean_tokens": mean_tokens, "config": asdict(cfg), **asdict(r)})
    return rows


def request_stream(n: int, seed: int = 0) -> list[list[str]]:
    """n requests of 1-4 passages cut to 40-1200 characters: small, varied, the same for both setups."""
    texts = load_corpus()
    rng = random.Random(seed)
    return [[rng.choice(texts)[: rng.randint(40, 1200)] for _ in range(rng.choice((1, 1, 1, 2, 4)))] for _ in range(n)]


async def drive(url: str, model: str, stream: list[list[str]], clients: int) -> dict:
    import httpx

    from engine.wire import packb

    latencies: list[float] = []
    errors = 0

    async def client(c: int) -> None:
        nonlocal errors
        async with httpx.AsyncClient(timeout=300) as http:
            for texts in stream[c::clients]:
                body = packb({"items": [{"text": t} for t in texts]})
                t0 = time.perf_counter()
                r = await http.post(
                    f"{url}/v1/encode/{model}", content=body, headers={"Content-Type": "application/msgpack"}
                )
                latencies.append((time.perf_counter() - t0) * 1000)
                errors += r.status_code != 200

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed = time.perf_counter() - t0
    latencies.sort()
    items = sum(len(t) for t in stream)
    return {
        "requests": len(stream),
        "items": items,
        "errors": errors,
        "seconds": elapsed,
        "requests_per_s": len(stream) / elapsed,
        "items_per_s": items / elapsed,
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[int(len(latencies) * 0.99)],
    }


def wait_http(url: str, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise TimeoutError(url)


def run_real(model: str, requests: int, clients: int) -> dict:
    from tests.helpers import LiveServer, free_port
    from tests.nats_support import NatsServer, WorkerProc

    stream = request_stream(requests)
    warm = request_stream(clients * 2, seed=1)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ns = NatsServer(Path(tmp) / "js").start()
        workers = [WorkerProc(ns.url, args=["--preload", model]) for _ in range(2)]
        gw = None
        try:
            for w in workers:
                w.wait_ready(300)
            gw = LiveServer(env={"SHOAL_QUEUE_URL": ns.url}).wait_ready()
            asyncio.run(drive(gw.url, model, warm, clients))
            results["pull (gateway + 2 workers over NATS JetStream)"] = asyncio.run(
                drive(gw.url, model, stream, clients)
            )
        finally:
            for p in (gw, *workers):
                if p is not None:
                    p.stop()
            ns.stop()
    backends = [LiveServer(args=["--threads", "1", "--preload", model]) for _ in range(2)]
    port = free_port()
    cmd = [sys.executable, "-m", "bench.push_router", "--port", str(port)]
    router = subprocess.Popen(cmd + [a for b in backends for a in ("--backend", b.url)], cwd=ROOT)
    try:
        for b in backends:
            b.wait_ready(300)
        wait_http(f"http://127.0.0.1:{port}/readyz")
        url = f"http://127.0.0.1:{port}"
        asyncio.run(drive(url, model, warm, clients))
        results["push (round-robin router + 2 shoal serve)"] = asyncio.run(drive(url, model, stream, clients))
    finally:
        router.terminate()
        router.wait()
        for b in backends:
            b.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--tiny", action="store_true", help="a tiny random BERT instead of MiniLM (faster)")
    parser.add_argument("--sim-only", action="store_true")
    args = parser.parse_args()
    report: dict = {"simulation": run_simulation()}
    if not args.sim_only:
        model = MODEL
        if args.tiny:
            from tests.helpers import make_tiny_bert

            model = str(make_tiny_bert(Path(tempfile.mkdtemp()) / "tiny-bert"))
        conditions = {
            "model": "tiny random BERT" if args.tiny else MODEL,
            "requests": args.requests,
            "clients": args.clients,
            "workers": 2,
            "threads_per_worker": 1,
            "cpus": os.cpu_count(),
            "machine": platform.platform(),
        }
        print(f"\n(b) REAL RUN on this machine: {conditions}")
        real = run_real(model, args.requests, args.clients)
        print(f"    {'setup':<48} {'req/s':>8} {'items/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
        for name, r in real.items():
            print(
                f"    {name:<48} {r['requests_per_s']:>8.1f} {r['items_per_s']:>8.1f} "
                f"{r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['errors']:>6}"
            )
        report["real"] = {"conditions": conditions, "results": real}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
