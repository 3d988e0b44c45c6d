"""Part 2 of bench/extract.py: callers over HTTP against `shoal serve` and a naive per-request GLiNER server, both
pinned to the same cores; and the bound batching can reach: the model's own windows per CPU-second at batch 1
vs length-sorted batches of N, measured directly on this CPU.

Every server runs under the same CPU affinity (--cores). shoal gets one torch thread per core (one worker,
one forward at a time, intra-op threads); the naive server gets --naive-threads torch threads per request
(default 1) and uses its cores by running requests side by side on FastAPI's thread pool. Both are counted
per item (one text) and per window (one model row: shoal splits a long text into overlapping windows; the
naive server truncates it to one), per server CPU-second (from /proc) and per wall second.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) of a process and its live descendants, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    mine, grew = {pid}, True
    while grew:
        more = {p for p, (ppid, _) in stats.items() if ppid in mine} - mine
        grew = bool(more)
        mine |= more
    return sum(stats.get(p, (0, 0.0))[1] for p in mine)


async def callers(
    url: str, pid: int, texts: list[str], n: int, body: Callable[[str], Any], parse: Callable[[Any], Any]
) -> tuple[float, float, list[Any]]:
    """`n` callers, one text per request, until every text is done: (server CPU seconds, wall seconds, results).
    The server was warmed up by the caller."""
    import httpx

    results: list[Any] = [None] * len(texts)
    todo = iter(range(len(texts)))

    async def caller(client: httpx.AsyncClient) -> None:
        for i in todo:
            r = await client.post(url, json=body(texts[i]), timeout=1200)
            r.raise_for_status()
            results[i] = parse(r.json())

    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits) as client:
        c, t = tree_cpu(pid), time.perf_counter()
        await asyncio.gather(*(caller(client) for _ in range(n)))
        return tree_cpu(pid) - c, time.perf_counter() - t, results


def start(cmd: list[str], cores: set[int], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """A server process pinned to `cores` from its first instruction (every thread it starts inherits it)."""
    return subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **env}, preexec_fn=lambda: os.sched_setaffinity(0, cores))


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(url)


def warm_up(url: str, body: Any) -> None:
    import httpx

    httpx.post(url, json=body, timeout=1200).raise_for_status()


def counters(base: str) -> tuple[float, float]:
    """(rows run through the model, forward calls) from a shoal server's /metrics."""
    import httpx

    text = httpx.get(f"{base}/metrics", timeout=10).text
    rows = sum(float(v) for v in re.findall(r'^shoal_items_total\{[^}]*task="extract"\} (\S+)', text, re.M))
    calls = sum(float(v) for v in re.findall(r"^shoal_batch_tokens_count\{[^}]*\} (\S+)", text, re.M))
    return rows, calls


def rates(name: str, cpu: float, wall: float, items: int, windows: float) -> dict[str, float]:
    return {
        f"{name}_items_per_cpu_s": items / cpu,
        f"{name}_items_per_s_wall": items / wall,
        f"{name}_windows_per_cpu_s": windows / cpu,
        f"{name}_windows_per_s_wall": windows / wall,
        f"{name}_server_cpu_s": cpu,
        f"{name}_wall_s": wall,
        f"{name}_cores_used": cpu / wall,
    }


def run_shoal(
    root: Path, name: str, cards: Path, texts: list[str], n: int, cores: set[int], body: Callable[[str], Any]
) -> tuple[dict[str, Any], list[Any]]:
    """`shoal serve` from the checkout at `root` (its own code: a before/after comparison), on `cores`."""
    from bench.extract_common import MODEL_ID
    from tests.helpers import free_port, stop_process

    port = free_port()
    env = {
        "SHOAL_MODEL_DIR": str(cards),
        "SHOAL_THREADS": str(len(cores)),
        "SHOAL_REQUEST_TIMEOUT_S": "1200",
        "PYTHONPATH": str(root),
        "HF_HUB_OFFLINE": "1",
    }
    cmd = [sys.executable, "-m", "shoal.cli", "serve", "--port", str(port), "--log-level", "warning"]
    proc = start(cmd, cores, env, root)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/readyz", proc)
        url = f"{base}/v1/extract/{MODEL_ID}"
        warm_up(url, body(texts[0]))
        rows0, calls0 = counters(base)
        cpu, wall, got = asyncio.run(callers(url, proc.pid, texts, n, body, lambda j: j["items"][0]["entities"]))
        rows1, calls1 = counters(base)
    finally:
        stop_process(proc)
    windows, calls = rows1 - rows0, calls1 - calls0
    out = rates(name, cpu, wall, len(texts), windows)
    out |= {f"{name}_windows": windows, f"{name}_forward_calls": calls, f"{name}_mean_batch": windows / calls}
    return out, got


def run_naive(
    folder: Path, texts: list[str], n: int, cores: set[int], threads: int, body: Callable[[str], Any]
) -> tuple[dict[str, Any], list[Any]]:
    from tests.helpers import free_port, stop_process

    port = free_port()
    cmd = [sys.executable, str(ROOT / "bench" / "gliner_naive_server.py"), str(folder), str(port), str(threads)]
    proc = start(cmd, cores, {"PYTHONPATH": str(ROOT)}, ROOT)
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
        url = f"http://127.0.0.1:{port}/extract"
        warm_up(url, body(texts[0]))
        cpu, wall, got = asyncio.run(callers(url, proc.pid, texts, n, body, lambda j: j["entities"]))
    finally:
        stop_process(proc)
    return rates("naive", cpu, wall, len(texts), len(texts)), got  # one (truncated) window per text


def concurrent(
    folder: Path,
    cards: Path,
    texts: list[str],
    n: int,
    cores: set[int],
    naive_threads: int,
    before: Path | None,
) -> dict[str, Any]:
    """shoal (this checkout, and `before`'s when given) and the naive server, each alone on the same cores."""
    from bench.extract_common import LABELS, THRESHOLD

    opts = {"threshold": THRESHOLD}
    shoal_body = lambda t: {"items": [{"text": t}], "params": {"labels": LABELS, "options": opts}}  # noqa: E731
    naive_body = lambda t: {"text": t, "labels": LABELS, "threshold": THRESHOLD}  # noqa: E731
    out: dict[str, Any] = {
        "callers": n,
        "cores": sorted(cores),
        "shoal_torch_threads": len(cores),
        "naive_torch_threads_per_request": naive_threads,
    }
    sides = [("shoal", ROOT)] + ([("before", before)] if before else [])
    got: dict[str, list[Any]] = {}
    for name, root in sides:
        figures, got[name] = run_shoal(root, name, cards, texts, n, cores, shoal_body)
        out |= figures
    figures, naive = run_naive(folder, texts, n, cores, naive_threads, naive_body)
    out |= figures
    for name, _ in sides:
        for unit in ("items_per_cpu_s", "items_per_s_wall", "windows_per_cpu_s", "windows_per_s_wall"):
            out[f"ratio_{name}_vs_naive_{unit}"] = out[f"{name}_{unit}"] / out[f"naive_{unit}"]
    out["entities_shoal"] = sum(map(len, got["shoal"]))
    out["entities_naive"] = sum(map(len, naive))
    out |= words_read(cards, texts)
    for name, _ in sides:
        per_word = (out["shoal_words"] / out[f"{name}_server_cpu_s"]) / (out["naive_words"] / out["naive_server_cpu_s"])
        out[f"ratio_{name}_vs_naive_words_per_cpu_s"] = per_word
    return out


def words_read(cards: Path, texts: list[str]) -> dict[str, int]:
    """Words the model reads: in shoal's windows (overlaps counted twice), and in the naive server's single
    window per text (GLiNER truncates a text at its window)."""
    from bench.extract_common import MODEL_ID, windows_of
    from tests.extract_support import load_through_catalogue

    model = load_through_catalogue(MODEL_ID, cards)
    _, rows, _ = windows_of(model, texts)
    naive = sum(min(len(model.words(t)), model.window_words) for t in texts)
    return {"shoal_words": sum(map(len, rows)), "naive_words": naive}


def bound(cards: Path, texts: list[str], cores: set[int], sizes: tuple[int, ...] = (4, 8, 16)) -> dict[str, Any]:
    """The model's windows per CPU-second through shoal's GlinerModel.predict at batch 1 (what a per-request
    server runs) and in length-sorted batches of N (the best batching can do): the most a batching server
    can gain over a per-request one on these cores, before any HTTP, queue or windowing cost."""
    import torch

    was = (os.sched_getaffinity(0), torch.get_num_threads())
    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))
    try:
        return _bound(cards, texts, cores, sizes)
    finally:
        os.sched_setaffinity(0, was[0])
        torch.set_num_threads(was[1])


def _bound(cards: Path, texts: list[str], cores: set[int], sizes: tuple[int, ...]) -> dict[str, Any]:
    from bench.extract_common import LABELS, MODEL_ID, THRESHOLD, windows_of
    from engine.model.gliner_runtime import GlinerModel, Window
    from tests.extract_support import load_through_catalogue

    model = load_through_catalogue(MODEL_ID, cards)
    assert isinstance(model, GlinerModel)
    _, rows, _ = windows_of(model, texts)
    wins = [Window(words, tuple(LABELS), THRESHOLD, True, False) for words in rows]
    model.predict(wins[:4])

    def per_cpu_s(batches: list[list[Window]]) -> float:
        c = time.process_time()
        for b in batches:
            model.predict(b)
        return len(wins) / (time.process_time() - c)  # this process: every torch thread counts

    ordered = sorted(wins, key=lambda w: len(w.words))
    out: dict[str, Any] = {"windows": len(wins), "cores": sorted(cores), "torch_threads": len(cores)}
    out["batch_1_windows_per_cpu_s"] = per_cpu_s([[w] for w in wins])
    for b in sizes:
        out[f"sorted_batch_{b}_windows_per_cpu_s"] = per_cpu_s([ordered[i : i + b] for i in range(0, len(wins), b)])
    best = max(out[f"sorted_batch_{b}_windows_per_cpu_s"] for b in sizes)
    out["best_batched_vs_batch_1"] = best / out["batch_1_windows_per_cpu_s"]
    return out
