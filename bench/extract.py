"""GLiNER entity extraction: shoal's engine vs gliner's own batched inference, and under concurrent callers vs a
naive per-request server; the bound batching can reach on this CPU; and the scaling of the long-text path.

Model: a random-weight GLiNER (span mode, word LSTM) over a BERT encoder (--hidden wide, --layers deep; the
GLiNER head is --hidden wide too) with the tests' WordPiece vocabulary, built offline and saved by GLiNER's own
`save_pretrained`; every side loads that folder. Texts: --texts sentences of the tiny vocabulary, mixed
lengths: 90% of 5-60 words, 10% of 1.5-4x GLiNER's window (--window words), which shoal splits into windows
sharing --overlap words (default 12.5% of the window, the ratio of the public cards: 48 of 384).

1. batched: items/s of one `extract` call on shoal's AsyncEngine over all texts, vs gliner's own
   `inference(texts, labels, batch_size=B)` at its best B over the same windows shoal runs (equal work: gliner
   by itself would truncate a long text at its window and lose the rest). Same outputs: on every text that
   fits one window, shoal's entities are compared with gliner's `inference` on the raw text.
2. concurrent: --callers callers each send one text per request until all texts are done, to `shoal serve`
   and to bench/gliner_naive_server.py (FastAPI, `predict_entities` per request), each alone and pinned to
   the same --cores (bench/extract_concurrent.py); --before DIR also runs the shoal checkout in DIR, for a
   before/after comparison in the same run. Counted per item and per window (a model row).
3. bound: the model's own windows per CPU-second at batch 1 vs length-sorted batches of 4/8/16 on --cores:
   the most any batching server can gain over a per-request one here.
4. scaling: one text of growing length through the engine (seconds per 1,000 words), and the input path alone
   (GLiNER's word split, token counts, window planning, merge) at 16x the sizes; a linear path keeps the
   per-word cost flat (ratio largest / smallest near 1).

Throughput is counted per CPU-second (this process's threads for 1, 3 and 4; the server process tree for 2,
from /proc) and per wall second. Ratios are against baselines measured in the same run. Writes
bench/results/extract-<parts>-h<hidden>-c<cores>.json.

    .venv/bin/python bench/extract.py [--texts 500] [--callers 16] [--cores 0,1] [--threads 1]
        [--hidden 128 --layers 2] [--before DIR] [--parts batched,concurrent,bound,scaling]
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.extract_common import LABELS, MODEL_ID, THRESHOLD, make_model, make_texts, windows_of  # noqa: E402
from bench.extract_concurrent import bound, concurrent  # noqa: E402


def best_of(repeats: int, fn: Any) -> tuple[float, float]:
    """Shortest CPU time (this process, every thread) and shortest wall time of `repeats` runs of fn()."""
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
    return cpu, wall


def key(e: dict[str, Any]) -> tuple[int, int, str]:
    return (int(e["start"]), int(e["end"]), str(e["label"]))


# -- 1. batched, in-process ------------------------------------------------------------------------


async def batched(folder: Path, cards: Path, texts: list[str], threads: int, repeats: int) -> dict[str, Any]:
    import torch

    from engine.config import EngineSettings
    from engine.model.gliner_runtime import GlinerModel
    from engine.runtime import AsyncEngine
    from tests.tiny_gliner import reference

    torch.set_num_threads(threads)
    ref = reference(folder)
    model = MODEL_ID  # served by its card (windows sharing the card's overlap), as the servers serve it
    async with AsyncEngine(EngineSettings(threads=threads, model_dir=cards)) as eng:
        await eng.extract(model, texts[:4], labels=LABELS)  # load and warm up
        loaded = await eng.registry.get(model)
        assert isinstance(loaded, GlinerModel)
        cpu, wall, got = float("inf"), float("inf"), []
        for _ in range(repeats):
            c, w = time.process_time(), time.perf_counter()
            got = await eng.extract(model, texts, labels=LABELS, options={"threshold": THRESHOLD})
            cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
        windows, _, single = windows_of(loaded, texts)
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


# -- 4. scaling of the long-text input path --------------------------------------------------------


def long_text(words: int, seed: int = 3) -> str:
    from tests.helpers import WORDS

    rnd = random.Random(seed)
    return " ".join(rnd.choice(WORDS) for _ in range(words))


async def scaling(cards: Path, threads: int, sizes: list[int]) -> dict[str, Any]:
    import torch

    from engine.config import EngineSettings
    from engine.model.gliner_runtime import GlinerModel
    from engine.runtime import AsyncEngine
    from engine.worker.extraction.windows import Found, merge, plan_windows

    torch.set_num_threads(threads)
    model = MODEL_ID
    end_to_end: dict[int, float] = {}
    path_only: dict[int, float] = {}
    async with AsyncEngine(EngineSettings(threads=threads, request_timeout_s=3600, model_dir=cards)) as eng:
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
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the in-process parts (1, 3, 4)")
    ap.add_argument("--cores", default=None, help="CPUs both servers (2) and the bound (3) run on; default all")
    ap.add_argument("--naive-threads", type=int, default=1, help="torch threads per request of the naive server")
    ap.add_argument("--before", type=Path, default=None, help="another shoal checkout to serve too (2)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=None, help="encoder feed-forward width (default 2x)")
    ap.add_argument("--head", type=int, default=None, help="GLiNER's own width (default --hidden)")
    ap.add_argument("--window", type=int, default=96, help="GLiNER's max_len: words per window")
    ap.add_argument("--overlap", type=int, default=None, help="words windows share (default window / 8)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each batched measurement (best is kept)")
    ap.add_argument("--quick", action="store_true", help="100 texts, 4 callers, small scaling sizes")
    ap.add_argument("--parts", default="batched,concurrent,bound,scaling", help="which measurements to run")
    args = ap.parse_args()
    if args.quick:
        args.texts, args.callers, args.repeats = 100, 4, 1
    sizes = [500, 2000] if args.quick else [1000, 4000, 16000]
    cores = {int(c) for c in args.cores.split(",")} if args.cores else os.sched_getaffinity(0)
    overlap = args.window // 8 if args.overlap is None else args.overlap

    with tempfile.TemporaryDirectory() as tmp:
        size = {"hidden": args.hidden, "layers": args.layers}
        size |= {"intermediate": args.intermediate or 2 * args.hidden, "head": args.head or args.hidden}
        folder, cards = make_model(Path(tmp), size, args.window, overlap)
        texts = make_texts(args.texts, args.window)
        results: dict[str, Any] = {"model": {**size, "window": args.window, "overlap": overlap}, "texts": args.texts}
        print(json.dumps(results), flush=True)
        parts = args.parts.split(",")
        if "batched" in parts:
            results["batched"] = asyncio.run(batched(folder, cards, texts, args.threads, args.repeats))
            print(json.dumps({"batched": results["batched"]}, indent=1), flush=True)
        if "concurrent" in parts:
            results["concurrent"] = concurrent(
                folder, cards, texts, args.callers, cores, args.naive_threads, args.before
            )
            print(json.dumps({"concurrent": results["concurrent"]}, indent=1), flush=True)
        if "bound" in parts:
            results["bound"] = bound(cards, texts, cores)
            print(json.dumps({"bound": results["bound"]}, indent=1), flush=True)
        if "scaling" in parts:
            results["scaling"] = asyncio.run(scaling(cards, args.threads, sizes))
            print(json.dumps({"scaling": results["scaling"]}, indent=1), flush=True)
    name = f"extract-{args.parts.replace(',', '-')}-h{args.hidden}-c{len(cores)}.json"
    out = ROOT / "bench" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    summary(results)


def summary(results: dict[str, Any]) -> None:
    m = results["model"]
    print(
        f"model: encoder {m['hidden']} wide, {m['layers']} layers, feed-forward {m['intermediate']}; GLiNER head "
        f"{m['head']}; {m['window']}-word windows sharing {m['overlap']}; {results['texts']} texts"
    )
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
            f"{c['callers']} callers on cores {c['cores']} (shoal {c['shoal_torch_threads']} torch threads, one "
            f"forward at a time; naive {c['naive_torch_threads_per_request']} per request, on FastAPI's pool):"
        )
        for name in ("shoal", "before"):
            if f"{name}_windows" not in c:
                continue
            print(
                f"  {name}: {c[f'{name}_windows']:.0f} windows in {c[f'{name}_forward_calls']:.0f} calls; vs naive "
                f"per item {c[f'ratio_{name}_vs_naive_items_per_cpu_s']:.2f}x CPU, "
                f"{c[f'ratio_{name}_vs_naive_items_per_s_wall']:.2f}x wall; per window "
                f"{c[f'ratio_{name}_vs_naive_windows_per_cpu_s']:.2f}x CPU, "
                f"{c[f'ratio_{name}_vs_naive_windows_per_s_wall']:.2f}x wall; per word read "
                f"{c[f'ratio_{name}_vs_naive_words_per_cpu_s']:.2f}x CPU; "
                f"{c[f'{name}_items_per_s_wall']:.1f} items/s, {c[f'{name}_cores_used']:.2f} cores busy"
            )
        print(f"  naive: {c['naive_items_per_s_wall']:.1f} items/s, {c['naive_cores_used']:.2f} cores busy")
    if "bound" in results:
        b = results["bound"]
        print(
            f"bound on cores {b['cores']}: the model alone, best length-sorted batch vs batch 1: "
            f"{b['best_batched_vs_batch_1']:.2f}x windows per CPU-second"
        )
    if "scaling" in results:
        s = results["scaling"]
        print(
            f"scaling: engine per-word cost x{s['engine_ratio_largest_vs_smallest']:.2f} over 16x the length; "
            f"input path x{s['input_path_ratio_largest_vs_smallest']:.2f}"
        )


if __name__ == "__main__":
    main()
