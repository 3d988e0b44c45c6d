"""Cross-encoder throughput and padding waste: shoal's packed score path vs sentence-transformers CrossEncoder.

Model: a random-weight BertForSequenceClassification the size of ms-marco-MiniLM-L-6-v2 (6 layers, 384
hidden, 1 label) with MiniLM's real tokenizer, built offline; both sides load the same folder. Pairs: short
queries (first words of passages) x passages from bench/data/passages.jsonl, so lengths vary a lot.

Prints pairs/s for both (ratio shoal / sentence-transformers, measured in this run), the largest score
difference, and padding waste: tokens pushed through the linear layers / real tokens, for shoal (packed,
measured by the worker) and for padded batches (CrossEncoder's unsorted batches, and length-sorted ones).
Writes bench/results/crossencoder.json.

    .venv/bin/python bench/crossencoder.py [--threads 2] [--queries 8] [--docs 32] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench import load_corpus  # noqa: E402

MODEL_ID = "bench/random-ms-marco-minilm"


def make_model(folder: Path) -> None:
    """Random MiniLM-L6-sized cross-encoder + MiniLM's tokenizer files."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    from tests.helpers import minilm_dir

    src = minilm_dir()
    cfg = BertConfig.from_pretrained(str(src), num_labels=1)
    torch.manual_seed(0)
    BertForSequenceClassification(cfg).eval().save_pretrained(str(folder), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (src / name).is_file():
            shutil.copy(src / name, folder / name)
    card = {
        "id": MODEL_ID,
        "family": "bert",
        "source": {"path": str(folder)},
        "tasks": ["score"],
        "outputs": ["score"],
        "score": {"kind": "classifier"},
        "pooling": "cls",
        "max_seq_len": 256,
        "profiles": {"default": {"max_batch_tokens": 8192, "max_batch_items": 256}},
    }
    (folder / "cards").mkdir()
    (folder / "cards" / "card.yaml").write_text(json.dumps(card))  # JSON is valid YAML


def workload(queries: int, docs: int) -> list[tuple[str, list[str]]]:
    texts = load_corpus()
    rng = np.random.default_rng(0)
    out = []
    for _ in range(queries):
        query = " ".join(texts[int(rng.integers(len(texts)))].split()[: int(rng.integers(3, 12))])
        picks = rng.choice(len(texts), size=docs, replace=False)
        # passages cut to very different lengths: a few words up to the full text
        out.append((query, [" ".join(texts[i].split()[: int(rng.integers(2, 200))]) for i in picks]))
    return out


def padded_tokens(lengths: list[int], batch_size: int, sort: bool) -> int:
    order = sorted(lengths) if sort else lengths
    return sum(len(b) * max(b) for b in (order[i : i + batch_size] for i in range(0, len(order), batch_size)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=32, help="CrossEncoder.predict batch size")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    import torch
    from sentence_transformers import CrossEncoder

    import shoal

    torch.set_num_threads(args.threads)
    work = workload(args.queries, args.docs)
    pairs = [(q, d) for q, docs in work for d in docs]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        make_model(folder)

        ce = CrossEncoder(str(folder), device="cpu", max_length=256)
        ce.predict(pairs[:8], batch_size=args.batch_size)  # warm-up
        st_time = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            st_scores = np.asarray(ce.predict(pairs, batch_size=args.batch_size, show_progress_bar=False))
            st_time = min(st_time, time.perf_counter() - t0)
        tok = ce.tokenizer
        lengths = [len(tok(q, d, truncation=True, max_length=256)["input_ids"]) for q, d in pairs]

        with shoal.Engine(model_dir=folder / "cards", offline=True, threads=args.threads) as engine:
            engine.score(MODEL_ID, "warm up", ["a", "b"])
            shoal_time = float("inf")
            for _ in range(args.repeat):
                stats = engine.core.worker.stats
                before = stats.tokens
                t0 = time.perf_counter()
                results = [engine.score(MODEL_ID, q, docs) for q, docs in work]
                shoal_time = min(shoal_time, time.perf_counter() - t0)
                computed = stats.tokens - before
        shoal_scores = np.array(
            [{s["item_id"]: s["score"] for s in r["scores"]}[f"item-{i}"] for r in results for i in range(args.docs)]
        )

    real = sum(lengths)
    row = {
        "pairs": len(pairs),
        "real_tokens": real,
        "threads": args.threads,
        "st_pairs_per_s": len(pairs) / st_time,
        "shoal_pairs_per_s": len(pairs) / shoal_time,
        "ratio_shoal_over_st": st_time / shoal_time,
        "max_abs_score_diff": float(np.abs(st_scores - shoal_scores).max()),
        "waste_shoal_packed": computed / real,
        "waste_padded_unsorted": padded_tokens(lengths, args.batch_size, sort=False) / real,
        "waste_padded_sorted": padded_tokens(lengths, args.batch_size, sort=True) / real,
    }
    print(f"cross-encoder, {len(pairs)} pairs ({real} real tokens), {args.threads} threads, fp32 CPU")
    print(f"{'engine':34s} {'pairs/s':>9s} {'tokens computed / real':>24s}")
    print(
        f"{'sentence-transformers CrossEncoder':34s} {row['st_pairs_per_s']:9.1f} {row['waste_padded_unsorted']:24.2f}"
    )
    print(
        f"{'shoal (packed, in-process Engine)':34s} {row['shoal_pairs_per_s']:9.1f} {row['waste_shoal_packed']:24.2f}"
    )
    print(f"{'padded, length-sorted batches':34s} {'':9s} {row['waste_padded_sorted']:24.2f}")
    print(
        f"shoal / sentence-transformers: {row['ratio_shoal_over_st']:.2f}x; max |score diff| {row['max_abs_score_diff']:.2e}"
    )
    out = ROOT / "bench" / "results" / "crossencoder.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(row, indent=2) + "\n")


if __name__ == "__main__":
    main()
