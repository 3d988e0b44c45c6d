"""GLiNER entity extraction: shoal's engine vs gliner's own batched inference, and under concurrent callers vs a
naive per-request server; and the scaling of the long-text input path.

Model: a random-weight GLiNER (span mode, word LSTM) over a BERT encoder (--hidden wide, --layers deep) with
the tests' WordPiece vocabulary, built offline and saved by GLiNER's own `save_pretrained`; every side loads
that folder. Texts: --texts sentences of the tiny vocabulary, mixed lengths: 90% of 5-60 words, 10% of 1.5-4x
GLiNER's window (--window words), which shoal splits into overlapping windows.

1. Batched, in-process: items/s of one `extract` call on shoal's AsyncEngine over all texts, vs gliner's own
   `inference(texts, labels, batch_size=B)` at its best B over the same windows shoal runs (equal work: gliner
   by itself would truncate a long text at its window and lose the rest). Same outputs: on every text that
   fits one window, shoal's entities are compared with gliner's `inference` on the raw text.
2. Concurrent, over HTTP: --callers callers each send one text per request until all texts are done, to
   `shoal serve` and to bench/gliner_naive_server.py (FastAPI, `predict_entities` per request).
3. Scaling: one text of growing length through the engine (seconds per 1,000 words), and the input path alone
   (GLiNER's word split, token counts, window planning, merge) at 16x the sizes; a linear path keeps the
   per-word cost flat (ratio largest / smallest near 1).

Throughput is counted per CPU-second (this process's threads for 1 and 3; the server process tree for 2, from
/proc), the measure that holds on a shared machine; wall-clock figures are printed beside it. Ratios are
against baselines measured in the same run. With more than one torch thread on a loaded machine, idle
threads spin at every barrier while their partner is descheduled, which inflates CPU seconds (a server's
most, since it waits between batches): --threads 1 gives both sides clean figures. Writes
bench/results/extract-<parts>-t<threads>.json.

    .venv/bin/python bench/extract.py [--texts 500] [--callers 16] [--threads 1] [--parts batched,concurrent,scaling]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LABELS = ["city", "animal", "person"]
THRESHOLD = 0.5
MODEL_ID = "bench/gliner"


def make_texts(n: int, window: int, seed: int = 0) -> list[str]:
    from tests.helpers import WORDS

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        k = rnd.randint(int(1.5 * window), 4 * window) if i % 10 == 9 else rnd.randint(5, 60)
        words = [rnd.choice(WORDS) for _ in range(k)]
        for _ in range(k // 12):
            words[rnd.randrange(k)] += rnd.choice([",", ".", "!"])
        out.append(" ".join(words))
    return out


def best_of(repeats: int, fn: Any) -> tuple[float, float]:
    """Shortest CPU time (this process, every thread) and shortest wall time of `repeats` runs of fn()."""
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
    return cpu, wall


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
    mine, total, grew = {pid}, 0.0, True
    while grew:
        more = {p for p, (ppid, _) in stats.items() if ppid in mine} - mine
        grew = bool(more)
        mine |= more
    for p in mine:
        total += stats.get(p, (0, 0.0))[1]
    return total


def key(e: dict[str, Any]) -> tuple[int, int, str]:
    return (int(e["start"]), int(e["end"]), str(e["label"]))


# -- 1. batched, in-process ------------------------------------------------------------------------


async def batched(folder: Path, texts: list[str], threads: int, repeats: int) -> dict[str, Any]:
    import torch

    from engine.config import EngineSettings
    from engine.model.gliner_runtime import GlinerModel
    from engine.runtime import AsyncEngine
    from engine.worker.extraction.windows import plan_windows
    from tests.tiny_gliner import reference

    torch.set_num_threads(threads)
    ref = reference(folder)
    model = str(folder)
    async with AsyncEngine(EngineSettings(threads=threads)) as eng:
        await eng.extract(model, texts[:4], labels=LABELS)  # load and warm up
        loaded = await eng.registry.get(model)
        assert isinstance(loaded, GlinerModel)
        cpu, wall, got = float("inf"), float("inf"), []
        for _ in range(repeats):
            c, w = time.process_time(), time.perf_counter()
            got = await eng.extract(model, texts, labels=LABELS, options={"threshold": THRESHOLD})
            cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
        room = loaded.max_tokens - loaded.prompt_tokens(LABELS)
        windows: list[str] = []
        single: list[int] = []
        for i, text in enumerate(texts):
            words = loaded.words(text)
            ranges = plan_windows(loaded.token_counts([w for w, _, _ in words]), loaded.window_words,
                                  loaded.overlap_words, room)  # fmt: skip
            windows += [text[words[r.first][1] : words[r.last - 1][2]] for r in ranges]
            single += [i] if len(ranges) == 1 else []
    sizes: dict[int, tuple[float, float]] = {}
    for b in (8, 16, 32, 64):
        sizes[b] = best_of(repeats, lambda b=b: ref.inference(windows, LABELS, threshold=THRESHOLD, batch_size=b))
    best_b = min(sizes, key=lambda b: sizes[b][0])
    short = [texts[i] for i in single]
    want = ref.inference(short, LABELS, threshold=THRESHOLD, batch_size=best_b)
    same = sum(
        [key(e) for e in got[i]["entities"]] == [key(e) for e in w]
        and all(abs(a["score"] - b["score"]) < 1e-4 for a, b in zip(got[i]["entities"], w, strict=False))
        for i, w in zip(single, want, strict=True)
    )
    n = len(texts)
    return {
        "texts": n,
        "windows": len(windows),
        "shoal_items_per_cpu_s": n / cpu,
        "shoal_items_per_s_wall": n / wall,
        "gliner_items_per_cpu_s_by_batch_size": {b: n / c for b, (c, _) in sizes.items()},
        "gliner_best_batch_size": best_b,
        "gliner_best_items_per_cpu_s": n / sizes[best_b][0],
        "gliner_best_items_per_s_wall": n / sizes[best_b][1],
        "ratio_shoal_vs_gliner_best_cpu": sizes[best_b][0] / cpu,
        "ratio_shoal_vs_gliner_best_wall": sizes[best_b][1] / wall,
        "same_outputs_on_single_window_texts": f"{same}/{len(single)}",
        "entities_found": sum(len(r["entities"]) for r in got),
    }


# -- 2. concurrent callers over HTTP ---------------------------------------------------------------


async def callers(
    url: str, pid: int, texts: list[str], n: int, body: Any, parse: Any
) -> tuple[float, float, list[Any]]:
    """`n` callers, one text per request, until every text is done: (server CPU seconds, wall seconds, results)."""
    import httpx

    results: list[Any] = [None] * len(texts)
    todo = iter(range(len(texts)))

    async def caller(client: httpx.AsyncClient) -> None:
        for i in todo:
            r = await client.post(url, json=body(texts[i]), timeout=600)
            r.raise_for_status()
            results[i] = parse(r.json())

    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits) as client:
        await client.post(url, json=body(texts[0]), timeout=600)  # warm up
        c, t = tree_cpu(pid), time.perf_counter()
        await asyncio.gather(*(caller(client) for _ in range(n)))
        return tree_cpu(pid) - c, time.perf_counter() - t, results


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


def concurrent(folder: Path, cards: Path, texts: list[str], n: int, threads: int) -> dict[str, Any]:
    from tests.helpers import LiveServer, free_port, stop_process

    env = {"SHOAL_MODEL_DIR": str(cards), "SHOAL_THREADS": str(threads), "SHOAL_REQUEST_TIMEOUT_S": "1200"}
    srv = LiveServer(env=env).wait_ready(300)
    try:
        shoal_cpu, shoal_s, shoal = asyncio.run(
            callers(
                f"{srv.url}/v1/extract/{MODEL_ID}",
                srv.proc.pid,
                texts,
                n,
                lambda t: {"items": [{"text": t}], "params": {"labels": LABELS, "options": {"threshold": THRESHOLD}}},
                lambda j: j["items"][0]["entities"],
            )
        )
    finally:
        srv.stop()
    port = free_port()
    cmd = [sys.executable, str(ROOT / "bench" / "gliner_naive_server.py"), str(folder), str(port), str(threads)]
    proc = subprocess.Popen(cmd, cwd=ROOT)
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
        naive_cpu, naive_s, naive = asyncio.run(
            callers(
                f"http://127.0.0.1:{port}/extract",
                proc.pid,
                texts,
                n,
                lambda t: {"text": t, "labels": LABELS, "threshold": THRESHOLD},
                lambda j: j["entities"],
            )
        )
    finally:
        stop_process(proc)
    lost = sum(max(0, len(a) - len(b)) for a, b in zip(shoal, naive, strict=True))
    return {
        "callers": n,
        "shoal_items_per_server_cpu_s": len(texts) / shoal_cpu,
        "naive_items_per_server_cpu_s": len(texts) / naive_cpu,
        "ratio_shoal_vs_naive_cpu": naive_cpu / shoal_cpu,
        "shoal_items_per_s_wall": len(texts) / shoal_s,
        "naive_items_per_s_wall": len(texts) / naive_s,
        "ratio_shoal_vs_naive_wall": naive_s / shoal_s,
        "entities_shoal": sum(map(len, shoal)),
        "entities_naive": sum(map(len, naive)),
        "entities_the_naive_server_misses_past_the_window": lost,
    }


# -- 3. scaling of the long-text input path --------------------------------------------------------


def long_text(words: int, seed: int = 3) -> str:
    from tests.helpers import WORDS

    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(words))


async def scaling(folder: Path, threads: int, sizes: list[int]) -> dict[str, Any]:
    import torch

    from engine.config import EngineSettings
    from engine.model.gliner_runtime import GlinerModel
    from engine.runtime import AsyncEngine
    from engine.worker.extraction.windows import Found, merge, plan_windows

    torch.set_num_threads(threads)
    model = str(folder)
    end_to_end: dict[int, float] = {}
    path_only: dict[int, float] = {}
    async with AsyncEngine(EngineSettings(threads=threads, request_timeout_s=3600)) as eng:
        await eng.extract(model, "warm up the model", labels=LABELS)
        loaded = await eng.registry.get(model)
        assert isinstance(loaded, GlinerModel)
        for n in sizes:
            text = long_text(n)
            t = time.process_time()
            out = await eng.extract(model, text, labels=LABELS, options={"threshold": THRESHOLD})
            end_to_end[n] = (time.process_time() - t) / n * 1000
            assert all(text[e["start"] : e["end"]] == e["text"] for e in out["entities"])
        room = loaded.max_tokens - loaded.prompt_tokens(LABELS)
        for n in [16 * s for s in sizes]:
            text = long_text(n)
            t = time.process_time()
            words = loaded.words(text)
            ranges = plan_windows(loaded.token_counts([w for w, _, _ in words]), loaded.window_words,
                                  loaded.overlap_words, room)  # fmt: skip
            # one entity per 8 words, repeated at every overlap, merged back
            parts = [
                (r.first, [Found(j, j + 1, "city", 0.6) for j in range(0, r.last - r.first - 1, 8)]) for r in ranges
            ]
            merge(parts, flat=True, multi_label=False)
            path_only[n] = (time.process_time() - t) / n * 1000
    first, last = sizes[0], sizes[-1]
    return {
        "engine_cpu_s_per_1k_words": end_to_end,
        "engine_ratio_largest_vs_smallest": end_to_end[last] / end_to_end[first],
        "input_path_cpu_s_per_1k_words": path_only,
        "input_path_ratio_largest_vs_smallest": path_only[16 * last] / path_only[16 * first],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=500)
    ap.add_argument("--callers", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--window", type=int, default=96, help="GLiNER's max_len: words per window")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each batched measurement (best is kept)")
    ap.add_argument("--quick", action="store_true", help="100 texts, 4 callers, small scaling sizes")
    ap.add_argument("--parts", default="batched,concurrent,scaling", help="which measurements to run")
    args = ap.parse_args()
    if args.quick:
        args.texts, args.callers, args.repeats = 100, 4, 1
    sizes = [500, 2000] if args.quick else [1000, 4000, 16000]

    from tests.extract_support import gliner_card
    from tests.tiny_gliner import make_tiny_gliner

    with tempfile.TemporaryDirectory() as tmp:
        folder = make_tiny_gliner(
            Path(tmp) / "gliner", max_len=args.window, hidden=args.hidden, layers=args.layers, seed=1
        )
        cards = gliner_card(folder, Path(tmp) / "cards", MODEL_ID)
        card = cards / f"{MODEL_ID.replace('/', '_')}.yaml"
        card.write_text(card.read_text().replace("max_batch_tokens: 4096", "max_batch_tokens: 16384"))
        texts = make_texts(args.texts, args.window)
        results: dict[str, Any] = {"model": {"hidden": args.hidden, "layers": args.layers, "window": args.window}}
        parts = args.parts.split(",")
        if "batched" in parts:
            results["batched"] = asyncio.run(batched(folder, texts, args.threads, args.repeats))
            print(json.dumps({"batched": results["batched"]}, indent=1), flush=True)
        if "concurrent" in parts:
            results["concurrent"] = concurrent(folder, cards, texts, args.callers, args.threads)
            print(json.dumps({"concurrent": results["concurrent"]}, indent=1), flush=True)
        if "scaling" in parts:
            results["scaling"] = asyncio.run(scaling(folder, args.threads, sizes))
            print(json.dumps({"scaling": results["scaling"]}, indent=1), flush=True)
    out = ROOT / "bench" / "results" / f"extract-{args.parts.replace(',', '-')}-t{args.threads}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    if "batched" in results:
        b = results["batched"]
        print(
            f"batched: shoal {b['shoal_items_per_cpu_s']:.1f} items per CPU-second vs gliner inference (batch "
            f"{b['gliner_best_batch_size']}) {b['gliner_best_items_per_cpu_s']:.1f}: "
            f"{b['ratio_shoal_vs_gliner_best_cpu']:.2f}x (wall {b['ratio_shoal_vs_gliner_best_wall']:.2f}x); same "
            f"outputs {b['same_outputs_on_single_window_texts']}"
        )
    if "concurrent" in results:
        c = results["concurrent"]
        print(
            f"{c['callers']} callers: shoal {c['shoal_items_per_server_cpu_s']:.1f} items per server CPU-second vs "
            f"naive {c['naive_items_per_server_cpu_s']:.1f}: {c['ratio_shoal_vs_naive_cpu']:.2f}x (wall "
            f"{c['ratio_shoal_vs_naive_wall']:.2f}x)"
        )
    if "scaling" in results:
        s = results["scaling"]
        print(
            f"scaling: engine per-word cost x{s['engine_ratio_largest_vs_smallest']:.2f} over 16x the length; "
            f"input path x{s['input_path_ratio_largest_vs_smallest']:.2f}"
        )


if __name__ == "__main__":
    main()
