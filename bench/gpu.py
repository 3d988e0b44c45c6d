"""GPU figures in one short run: matmul peaks, encode throughput per precision beside sentence-transformers,
several models resident at once, and GLiNER extraction under concurrent callers.

Made to be run once on a machine with a CUDA GPU, where time on the device is scarce: every section runs in
its own `try`, so a failure leaves the other sections' figures and its own traceback in the results, and
everything lands in one JSON file (bench/results/gpu.json, or --out). Timings synchronise the device.

- environment: torch, CUDA, the device, whether flash-attn is importable (shoal uses its varlen kernel in
  half precision when it is);
- peaks: dense matmul FLOP/s per precision with the embedding model's own layer shapes at its token budget
  (bench/roofline_parts.py: MatmulPeak, as the CPU roofline measures them);
- encode: the corpus (bench/data/passages.jsonl, repeated to --passages) through sentence-transformers float32
  and float16, shoal in-process pinned to each precision the device offers, and shoal's default (a fresh
  profile store: the engine gates and picks a precision itself); rounds interleaved; passages/s, useful
  FLOP/s against the peak, each system's cosine to sentence-transformers float32;
- resident: one engine holding the embedding model, a cross-encoder and a GLiNER at once, each model's
  items/s alone and with all three called together, and the device memory they took;
- extract: the GLiNER with 1, 8 and 32 concurrent callers (the batcher fills batches from them).

The reranker and GLiNER have random weights (bench/gpu_models.py): nothing can be fetched where this runs,
and their speed depends only on their shapes. On a CPU, `--device cpu --tiny` runs the same code on small
random models; the test suite does that to keep this script working.

    python bench/gpu.py [--model-dir DIR] [--passages 4000] [--rounds 3] [--device cuda] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench import gpu_models, load_corpus  # noqa: E402
from bench.roofline_parts import MatmulPeak  # noqa: E402

LABELS = ["person", "organisation", "place", "date", "product"]
Result = dict[str, Any]
T = TypeVar("T")


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], T], device: str) -> tuple[float, T]:
    """(wall seconds, result) of fn(), the device's queued work included."""
    sync(device)
    started = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - started, result


def environment(device: str) -> Result:
    out: Result = {"torch": torch.__version__, "device": device, "cuda": torch.version.cuda}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        out |= {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "memory_gib": props.total_memory / 2**30,
        }
        out |= {"multiprocessors": props.multi_processor_count, "bf16": torch.cuda.is_bf16_supported()}
    try:
        import flash_attn

        out["flash_attn"] = flash_attn.__version__
    except ImportError:
        out["flash_attn"] = None
    return out


def device_precisions(device: str) -> list[str]:
    """The precisions shoal offers on this device, float32 first, without int8 (a CPU-only profile)."""
    from engine.model.precision import available

    return [p for p in available(device) if p != "int8"]


def unit(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float64)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


class EncodeSystems:
    """Every encode system under test, loaded once; `run(name)` encodes the texts and returns their vectors."""

    def __init__(self, model_dir: Path, device: str, precisions: list[str], n: int, work: Path) -> None:
        from sentence_transformers import SentenceTransformer

        import shoal

        self.model, self.device = str(model_dir), device
        self.st = {"float32": SentenceTransformer(self.model, device=device)}
        if device.startswith("cuda"):
            self.st["float16"] = SentenceTransformer(self.model, device=device).half()
        self.engines = {
            p: shoal.Engine(device=device, precision=p, auto_tune=False, max_items=n, profile_store=work / f"{p}.json")
            for p in precisions
        }
        self.default = shoal.Engine(device=device, max_items=n, profile_store=work / "default.json")
        started = time.perf_counter()
        self.default.encode(self.model, ["warm up"])  # the first load serves float32 and starts the gate behind it
        while (info := self.default_info())["precision_in_use"].get("tuning"):
            time.sleep(0.2)
        self.default_tune_seconds = time.perf_counter() - started
        self.default_precision = info["precision_in_use"].get("precision")

    def default_info(self) -> Result:
        return next(m for m in self.default.models() if m["name"] == self.model)

    def names(self) -> list[str]:
        return [*(f"st:{p}" for p in self.st), *(f"shoal:{p}" for p in self.engines), "shoal:default"]

    def run(self, name: str, texts: list[str]) -> np.ndarray:
        kind, _, precision = name.partition(":")
        if kind == "st":
            batch = 128 if self.device.startswith("cuda") else 32
            return np.asarray(self.st[precision].encode(texts, batch_size=batch, convert_to_numpy=True), np.float32)
        engine = self.default if precision == "default" else self.engines[precision]
        return np.stack([np.asarray(r["dense"], np.float32) for r in engine.encode(self.model, texts)])

    def close(self) -> None:
        for engine in [*self.engines.values(), self.default]:
            engine.close()


def encode_section(model_dir: Path, texts: list[str], device: str, rounds: int, work: Path) -> Result:
    from engine.arch.flops import forward_flops
    from engine.catalogue.catalogue import Catalogue
    from engine.model.loader import load_model

    card = Catalogue().get(str(model_dir))
    probe = load_model(card, "cpu", precision="float32")
    lengths = [len(ids) for ids in probe.tokenizer(texts, truncate=True)]
    flops = forward_flops(probe.config, lengths)
    precisions = device_precisions(device)
    budget = card.profiles["default"].max_batch_tokens
    peaks = {p: MatmulPeak(probe.config, p, budget, device).measure(passes=5) for p in precisions}
    systems = EncodeSystems(model_dir, device, precisions, len(texts), work)
    times: dict[str, list[float]] = {name: [] for name in systems.names()}
    vectors: dict[str, np.ndarray] = {}
    try:
        for name in systems.names():
            systems.run(name, texts[:64])  # warm: kernels chosen, caches filled
        for _ in range(rounds):  # interleaved, so a slow moment hits every system alike
            for name in systems.names():
                secs, vectors[name] = timed(lambda name=name: systems.run(name, texts), device)
                times[name].append(secs)
    finally:
        systems.close()
    reference = unit(vectors["st:float32"])
    rows: Result = {}
    for name, ts in times.items():
        precision = systems.default_precision if name == "shoal:default" else name.partition(":")[2]
        cos = np.sum(unit(vectors[name]) * reference, axis=1)
        best = min(ts)
        rows[name] = {
            "precision": precision,
            "passages_per_s": len(texts) / best,
            "median_passages_per_s": len(texts) / statistics.median(ts),
            "useful_flops_per_s": flops.total / best,
            "of_peak": flops.total / best / peaks[precision] if precision in peaks else None,
            "mean_cos_to_st_fp32": float(cos.mean()),
            "min_cos_to_st_fp32": float(cos.min()),
        }
    st = rows["st:float32"]["passages_per_s"]
    for row in rows.values():
        row["vs_st_fp32"] = row["passages_per_s"] / st
    return {
        "passages": len(texts),
        "tokens": flops.tokens,
        "useful_gflop": flops.total / 1e9,
        "peaks_gflops": {p: v / 1e9 for p, v in peaks.items()},
        "default_tune_seconds": systems.default_tune_seconds,
        "systems": rows,
    }


def items_per_second(calls: list[Callable[[], int]], device: str, callers: int) -> float:
    """Items done per second by `calls` (each returns its item count) run by `callers` threads at once."""
    with ThreadPoolExecutor(max_workers=callers) as pool:
        wall, done = timed(lambda: list(pool.map(lambda call: call(), calls)), device)
    return sum(done) / wall


def resident_section(model_dir: Path, device: str, texts: list[str], tiny: bool, work: Path) -> Result:
    import shoal

    cards = work / "cards"
    reranker = gpu_models.reranker(model_dir, work / "reranker", cards)
    gliner = gpu_models.gliner(work / "gliner", cards, tiny)
    words = gpu_models.gliner_texts(len(texts))
    embedder = str(model_dir)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    with shoal.Engine(device=device, model_dir=cards, max_items=len(texts)) as engine:
        batch = 64
        calls: dict[str, Callable[[int], int]] = {
            embedder: lambda i: len(engine.encode(embedder, texts[i : i + batch])),
            reranker: lambda i: len(engine.score(reranker, texts[i], texts[i : i + batch])["scores"]),
            gliner: lambda i: len(engine.extract(gliner, words[i : i + batch], labels=LABELS)),
        }
        starts = range(0, len(texts) - batch + 1, batch) or range(1)
        for call in calls.values():
            call(0)  # loads the model (all three stay resident: nothing evicts them at these sizes)
        alone = {
            name: items_per_second([lambda i=i, c=c: c(i) for i in starts], device, 4) for name, c in calls.items()
        }
        mixed = [lambda i=i, name=name, c=c: (name, c(i)) for i in starts for name, c in calls.items()]
        with ThreadPoolExecutor(max_workers=12) as pool:  # every model called at once, 4 callers each
            wall, done = timed(lambda: list(pool.map(lambda job: job(), mixed)), device)
        resident = [m["name"] for m in engine.models() if m.get("loaded")]
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.startswith("cuda") else None
    return {
        "models": list(calls),
        "resident_after": resident,
        "alone_items_per_s": alone,
        "together_items_per_s": {name: sum(n for who, n in done if who == name) / wall for name in calls},
        "peak_device_memory_gib": memory,
    }


def extract_section(device: str, tiny: bool, work: Path, n: int, concurrency: tuple[int, ...] = (1, 8, 32)) -> Result:
    import shoal

    cards = work / "cards-extract"
    gliner = gpu_models.gliner(work / "gliner-extract", cards, tiny)
    words = gpu_models.gliner_texts(n, seed=1)
    with shoal.Engine(device=device, model_dir=cards, max_items=n) as engine:
        engine.extract(gliner, words[:4], labels=LABELS)  # load
        out: Result = {}
        for callers in concurrency:
            calls = [lambda t=t: len(engine.extract(gliner, [t], labels=LABELS)) for t in words]
            out[str(callers)] = items_per_second(calls, device, callers)
    return {"texts": n, "texts_per_s_by_callers": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model-dir", type=Path, default=None, help="sentence-transformers folder (default: MiniLM's)")
    ap.add_argument("--passages", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extract-texts", type=int, default=512)
    ap.add_argument("--tiny", action="store_true", help="small random models (a CPU smoke run)")
    ap.add_argument("--sections", default="encode,resident,extract")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu.json")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="shoal-gpu-"))
    results: Result = {"environment": environment(args.device), "date": time.strftime("%Y-%m-%d")}
    model_dir = args.model_dir.resolve() if args.model_dir else None  # the engine names a local model by its path
    if model_dir is None:
        from tests.helpers import minilm_dir

        model_dir = gpu_models.tiny_embedder(work / "embedder") if args.tiny else minilm_dir()
    corpus = load_corpus()
    texts = [corpus[i % len(corpus)] for i in range(args.passages)]  # repeated: a GPU needs more than 2,000
    sections: dict[str, Callable[[], Result]] = {
        "encode": lambda: encode_section(model_dir, texts, args.device, args.rounds, work),
        "resident": lambda: resident_section(model_dir, args.device, texts, args.tiny, work),
        "extract": lambda: extract_section(args.device, args.tiny, work, args.extract_texts),
    }
    for name in args.sections.split(","):
        started = time.perf_counter()
        try:
            results[name] = sections[name]()
        except Exception:  # noqa: BLE001 - one section's failure must not cost the others' figures
            results[name] = {"error": traceback.format_exc()[-3000:]}
        results[name]["seconds"] = time.perf_counter() - started
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1, default=str))  # after each section: nothing lost
        print(f"{name}: {json.dumps(results[name], default=str)[:2000]}", flush=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
