"""Throughput under overload: single-text encodes from 16 and from 256 concurrent clients against one
`shoal serve`, with a /healthz prober running alongside.

Each client holds one keep-alive connection, posts one short text to /v1/encode (JSON), waits for its answer
and posts the next; a 503 with Retry-After makes it wait that long (as a polite client does) and counts as
shed. The clients are raw asyncio sockets in a process of their own (a few microseconds a request, so their
CPU does not stand in for the server's), and the prober polls /healthz every 50 ms on its own blocking
connection in a third process. Per phase: admitted requests per second, their p50/p99 latency, shed
requests, /healthz p50/p99. The ratios compare 256 clients with 16 in the same run (the acceptance: at
least 0.8 of the throughput, at most 5x the p99, /healthz p99 under 100 ms). The server runs with
SHOAL_ADMISSION_WAIT_S=--wait (0.1, the default); with --no-admission a second one runs with it off
(SHOAL_ADMISSION_WAIT_S=0) for comparison.
Clients and server share the machine's cores.

    python -m bench.overload [--seconds 15] [--clients 16,256] [--wait 0.1] [--no-admission] [--out bench/results/overload.json]
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


class RawClient:
    """One keep-alive HTTP/1.1 connection that sends prebuilt requests and reads the answers with minimal parsing:
    a load generator that costs a few microseconds a request, so the clients' own CPU does not become the
    bottleneck the benchmark reports (httpx with 256 connections in one loop costs more than the server)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, raw: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(raw)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            raise ConnectionError("closed") from None
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines[1:] if ln)}
        body = await self.reader.readexactly(int(headers.get(b"content-length", b"0")))
        if headers.get(b"connection", b"").lower() == b"close":
            self.close()
        return status, headers, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def encode_request(host: str, i: int, n: int) -> bytes:
    body = json.dumps({"items": [{"text": f"client {i} text {n}"}]}).encode()
    return (
        f"POST /v1/encode/{MINILM} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def load(url: str, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    """`clients` closed-loop clients for warmup + seconds; only the last `seconds` are counted."""
    host, port = url.removeprefix("http://").split(":")
    ok: list[float] = []
    shed = errors = 0
    counting = asyncio.Event()
    stop = asyncio.Event()

    async def one(i: int) -> None:
        nonlocal shed, errors
        conn = RawClient(host, int(port))
        n = 0
        while not stop.is_set():
            n += 1
            started = time.perf_counter()
            try:
                status, headers, _ = await conn.request(encode_request(host, i, n))
            except (ConnectionError, OSError):
                errors += counting.is_set()
                await asyncio.sleep(0.01)
                continue
            took = time.perf_counter() - started
            if status == 200:
                if counting.is_set():
                    ok.append(took)
            elif status == 503 and b"retry-after" in headers:
                shed += counting.is_set()
                await asyncio.sleep(min(float(headers[b"retry-after"]), 5.0))
            else:
                errors += counting.is_set()
        conn.close()

    tasks = [asyncio.create_task(one(i)) for i in range(clients)]
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
    }


def probe(url: str, seconds: float, warmup: float) -> dict[str, Any]:
    """/healthz every 50 ms on its own blocking connection, in its own process (so the load's event loop
    cannot delay it): p50/p99 over the counted seconds."""
    host, port = url.removeprefix("http://").split(":")
    health: list[float] = []
    raw = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    t_start = time.perf_counter()
    sock: socket.socket | None = None
    while (now := time.perf_counter()) < t_start + warmup + seconds:
        started = time.perf_counter()
        try:
            if sock is None:
                sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(raw)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed")
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(
                next(
                    (ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")), b"0"
                )
            )
            while len(rest) < length:
                rest += sock.recv(65536)
            if now >= t_start + warmup and head.startswith(b"HTTP/1.1 200"):
                health.append(time.perf_counter() - started)
        except OSError:
            sock = None
        time.sleep(0.05)
    return {
        "healthz_p50_ms": round(1000 * (pct(health, 0.5) or 0), 2),
        "healthz_p99_ms": round(1000 * (pct(health, 0.99) or 0), 2),
        "healthz_probes": len(health),
    }


def role(kind: str, url: str, clients: int, seconds: float, warmup: float) -> subprocess.Popen[bytes]:
    """This file run again as a load or probe process; it prints its figures as one JSON line."""
    cmd = [sys.executable, "-m", "bench.overload", "--role", kind, "--url", url, "--clients", str(clients),
           "--seconds", str(seconds), "--warmup", str(warmup)]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE)


def phase(url: str, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    """The load and the prober in two processes of their own, at once; their figures merged."""
    procs = [role("load", url, clients, seconds, warmup), role("probe", url, clients, seconds, warmup)]
    merged: dict[str, Any] = {}
    for p in procs:
        out, _ = p.communicate(timeout=seconds + warmup + 180)
        merged.update(json.loads(out.decode().strip().splitlines()[-1]))
    return merged


def run(env: dict[str, str], clients: list[int], seconds: float, warmup: float) -> list[dict[str, Any]]:
    proc, url = start_server(env)
    try:
        httpx.post(f"{url}/v1/encode/{MINILM}", json={"items": [{"text": "warm"}]}, timeout=120)
        return [phase(url, n, seconds, warmup) for n in clients]
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
    ap.add_argument("--wait", type=float, default=0.1, help="SHOAL_ADMISSION_WAIT_S of the admission run")
    ap.add_argument("--no-admission", action="store_true", help="also run with admission control off")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "overload.json")
    ap.add_argument("--role", choices=("load", "probe"), help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        n = int(args.clients)
        figures = (
            asyncio.run(load(args.url, n, args.seconds, args.warmup))
            if args.role == "load"
            else probe(args.url, args.seconds, args.warmup)
        )
        print(json.dumps(figures))
        return
    clients = [int(c) for c in args.clients.split(",")]
    results: dict[str, Any] = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "date": time.strftime("%F")}
    on = {"SHOAL_ADMISSION_WAIT_S": str(args.wait)}
    results["admission"] = run(on, clients, args.seconds, args.warmup)
    table(f"admission control on (SHOAL_ADMISSION_WAIT_S={args.wait:g})", results["admission"])
    if args.no_admission:
        results["no_admission"] = run({"SHOAL_ADMISSION_WAIT_S": "0"}, clients, args.seconds, args.warmup)
        table("admission control off (SHOAL_ADMISSION_WAIT_S=0)", results["no_admission"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
