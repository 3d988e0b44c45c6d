"""Token buckets: a CPU forward pass over batches whose token counts are new each round, padded or not.

oneDNN builds and caches a kernel per row count; a serving engine's batches have a new token count almost every
time. This bench forms fresh batches each round (the corpus shuffled with a new seed, cut at the token budget),
runs MiniLM's forward over them with the counts padded to `token_bucket` sizes and as they are, rounds
interleaved, and prints passages/s of each with the ratio, per precision (float32 and bfloat16 where the CPU's
oneDNN runs it). Writes bench/results/token_buckets.json.

    .venv/bin/python bench/token_buckets.py [--threads 2] [--rounds 8] [--limit 400] [--precisions float32,bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

import engine.model.packed as packed  # noqa: E402
from bench import load_corpus  # noqa: E402
from engine.arch.linear import _DTYPES  # noqa: E402
from engine.catalogue.catalogue import Catalogue  # noqa: E402
from engine.model.loader import load_model  # noqa: E402
from engine.model.packed import PackedModel  # noqa: E402
from engine.model.sequences import Encoded  # noqa: E402

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BUDGET = 4096  # the CPU profile's token budget


def fresh_batches(encoded: list[Encoded], seed: int) -> list[list[Encoded]]:
    """The corpus in a new order, cut into batches of at most BUDGET tokens: new token counts every seed."""
    order = encoded[:]
    random.Random(seed).shuffle(order)
    batches: list[list[Encoded]] = [[]]
    used = 0
    for seq in order:
        if used + len(seq.ids) > BUDGET and batches[-1]:
            batches.append([])
            used = 0
        batches[-1].append(seq)
        used += len(seq.ids)
    return batches


def interleaved_rounds(
    model: PackedModel,
    encoded: list[Encoded],
    arms: dict[str, Callable[[], None]],
    rounds: int,
    seed: Callable[[int, str], int],
) -> dict[str, list[float]]:
    """passages/s of the whole forward per round for each arm (its callable switches it on), the arms' order
    flipped every round; each round's batches come from `fresh_batches(encoded, seed(round, arm))`."""
    names = list(arms)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 else names[::-1]:
            arms[name]()
            batches = fresh_batches(encoded, seed(r, name))
            started = time.perf_counter()
            for batch in batches:
                model.forward(batch)
            runs[name].append(len(encoded) / (time.perf_counter() - started))
    return runs


def measure(precision: str, texts: list[str], rounds: int) -> dict[str, list[float]]:
    """passages/s per round, bucketed and raw, rounds interleaved (the order flips every round)."""
    model = load_model(Catalogue().get(MODEL), "cpu", precision=precision)
    encoded = model.encode_texts(texts, truncate=True)
    pad = packed.PAD_TO_BUCKETS
    model.forward(encoded[:16])  # warm-up on a small batch (below the bucketed sizes)

    def padding(on: bool) -> Callable[[], None]:  # the engine pads on AMX CPUs only; both are timed here
        return lambda: setattr(packed, "PAD_TO_BUCKETS", on)

    arms = {"bucketed": padding(True), "raw": padding(False)}
    runs = interleaved_rounds(model, encoded, arms, rounds, lambda r, arm: 2 * r + (arm == "bucketed"))
    packed.PAD_TO_BUCKETS = pad
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds per variant")
    ap.add_argument("--limit", type=int, default=400, help="passages of bench/data/passages.jsonl")
    ap.add_argument("--precisions", default=None, help="comma-separated (default: float32 and bfloat16 if offered)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    offered = ["float32", *(["bfloat16"] if torch.bfloat16 in _DTYPES else [])]
    precisions = args.precisions.split(",") if args.precisions else offered
    texts = load_corpus(args.limit)
    report: dict[str, dict[str, float]] = {}
    for precision in precisions:
        runs = measure(precision, texts, args.rounds)
        row = {
            f"{k}_{stat}": f(v) for k, v in runs.items() for stat, f in (("best", max), ("median", statistics.median))
        }
        row["ratio_median"] = row["bucketed_median"] / row["raw_median"]
        row["ratio_best"] = row["bucketed_best"] / row["raw_best"]
        report[precision] = row
        print(
            f"{precision:9s} bucketed {row['bucketed_median']:6.1f} passages/s (best {row['bucketed_best']:.1f}), "
            f"raw {row['raw_median']:6.1f} (best {row['raw_best']:.1f}): "
            f"{row['ratio_median']:.2f}x median, {row['ratio_best']:.2f}x best",
            flush=True,
        )
    out = ROOT / "bench" / "results" / "token_buckets.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"threads": args.threads, "rounds": args.rounds, "passages": len(texts), **report}, indent=2)
    )


if __name__ == "__main__":
    main()
