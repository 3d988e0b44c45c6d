"""Throughput under overload: single-text encodes from 16 and from 256 concurrent clients against one
`shoal serve`, with a /healthz prober running alongside.

Each client posts one short text to /v1/encode (JSON), waits for its answer and posts the next; a 503 with
Retry-After makes it wait that long (as a polite client does) and counts as shed. Per phase: admitted
requests per second, their p50/p99 latency, shed requests, /healthz p50/p99 from a prober polling every
50 ms on its own connection. The ratios compare 256 clients with 16 in the same run (the acceptance: at
least 0.8 of the throughput, at most 5x the p99, /healthz p99 under 100 ms). The server runs with
SHOAL_ADMISSION_WAIT_S=--wait; with --no-admission a second one runs without it (the default) for comparison.
Clients and server share the machine, so the figures include the clients' own CPU.

    python -m bench.overload [--seconds 15] [--clients 16,256] [--wait 0.5] [--no-admission] [--out bench/results/overload.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "shoal.cli", "serve", "--port", str(port), "--log-level", "warning"]
    full = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **env}
    proc = subprocess.Popen(cmd, env=full, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("shoal serve did not become ready")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def phase(url: str, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    """`clients` closed-loop clients for warmup + seconds; only the last `seconds` are counted."""
    ok: list[float] = []
    shed = errors = 0
    health: list[float] = []
    counting = asyncio.Event()
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with (
        httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client,
        httpx.AsyncClient(base_url=url, timeout=30) as prober,
    ):

        async def one(i: int) -> None:
            nonlocal shed, errors
            n = 0
            while not stop.is_set():
                n += 1
                started = time.perf_counter()
                try:
                    r = await client.post(f"/v1/encode/{MINILM}", json={"items": [{"text": f"client {i} text {n}"}]})
                except httpx.HTTPError:
                    errors += counting.is_set()
                    continue
                took = time.perf_counter() - started
                if r.status_code == 200:
                    if counting.is_set():
                        ok.append(took)
                elif r.status_code == 503 and "retry-after" in r.headers:
                    shed += counting.is_set()
                    await asyncio.sleep(min(float(r.headers["retry-after"]), 5.0))
                else:
                    errors += counting.is_set()

        async def probe() -> None:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    r = await prober.get("/healthz")
                    if counting.is_set() and r.status_code == 200:
                        health.append(time.perf_counter() - started)
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)

        tasks = [asyncio.create_task(one(i)) for i in range(clients)] + [asyncio.create_task(probe())]
        await asyncio.sleep(warmup)
        counting.set()
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)
        elapsed = time.perf_counter() - t0
        counting.clear()
        stop.set()
        await asyncio.wait(tasks, timeout=130)
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "admitted_per_s": round(len(ok) / elapsed, 2),
        "p50_ms": round(1000 * (pct(ok, 0.5) or 0), 1),
        "p99_ms": round(1000 * (pct(ok, 0.99) or 0), 1),
        "shed": shed,
        "errors": errors,
        "healthz_p50_ms": round(1000 * (pct(health, 0.5) or 0), 2),
        "healthz_p99_ms": round(1000 * (pct(health, 0.99) or 0), 2),
        "healthz_probes": len(health),
    }


def run(env: dict[str, str], clients: list[int], seconds: float, warmup: float) -> list[dict[str, Any]]:
    proc, url = start_server(env)
    try:
        httpx.post(f"{url}/v1/encode/{MINILM}", json={"items": [{"text": "warm"}]}, timeout=120)
        return [asyncio.run(phase(url, n, seconds, warmup)) for n in clients]
    finally:
        proc.terminate()
        proc.wait(30)


def table(label: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{label}")
    print(
        f"{'clients':>7} {'admitted/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'shed':>6} {'errors':>6} {'hz p50':>7} {'hz p99':>7}"
    )
    for r in rows:
        print(
            f"{r['clients']:>7} {r['admitted_per_s']:>10} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['shed']:>6} "
            f"{r['errors']:>6} {r['healthz_p50_ms']:>7} {r['healthz_p99_ms']:>7}"
        )
    base, top = rows[0], rows[-1]
    if base["admitted_per_s"] and base["p99_ms"]:
        print(
            f"{top['clients']} vs {base['clients']} clients: throughput x{top['admitted_per_s'] / base['admitted_per_s']:.2f}"
            f", p99 x{top['p99_ms'] / base['p99_ms']:.2f}, /healthz p99 {top['healthz_p99_ms']} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--clients", default="16,256")
    ap.add_argument("--wait", type=float, default=0.5, help="SHOAL_ADMISSION_WAIT_S of the admission run")
    ap.add_argument("--no-admission", action="store_true", help="also run with admission control off")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "overload.json")
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    results: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "date": time.strftime("%F")}
    on = {"SHOAL_ADMISSION_WAIT_S": str(args.wait)}
    results["admission"] = run(on, clients, args.seconds, args.warmup)
    table(f"admission control on (SHOAL_ADMISSION_WAIT_S={args.wait:g})", results["admission"])
    if args.no_admission:
        results["no_admission"] = run({}, clients, args.seconds, args.warmup)
        table("admission control off (the default)", results["no_admission"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
