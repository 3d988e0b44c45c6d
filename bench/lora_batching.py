"""LoRA batching: one packed forward with per-row adapter deltas vs one forward per adapter group (shoal's pick).

A small BERT, 3 PEFT adapters plus base rows, mixed-length inputs; best-of-N seconds for each strategy in the
same run; writes bench/results/lora_batching.json.

    .venv/bin/python bench/lora_batching.py [--rows 96] [--repeat 5] [--threads 2]
"""

from __future__ import annotations

import argparse
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
SMALL = dict(
    hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512, max_position_embeddings=128
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import peft
    import torch
    from transformers import BertModel

    from engine.catalogue.catalogue import Catalogue
    from engine.model.loader import load_model
    from engine.model.lora import AdapterCache
    from engine.model.sequences import Encoded
    from tests.helpers import make_tiny_bert

    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        base = make_tiny_bert(Path(tmp) / "base", **SMALL)
        names = ["a", "b", "c"]
        for i, name in enumerate(names):
            torch.manual_seed(i)
            hf = BertModel.from_pretrained(str(base), add_pooling_layer=False)
            cfg = peft.LoraConfig(
                r=8, lora_alpha=16, target_modules=["query", "value", "dense"], init_lora_weights=False
            )
            peft.get_peft_model(hf, cfg).save_pretrained(str(Path(tmp) / "adapters" / name))
        loaded = load_model(Catalogue().get(str(base)), "cpu", True, AdapterCache(8, Path(tmp) / "adapters"))
        tags = [rng.choice([*names, None]) for _ in range(args.rows)]
        seqs = [[rng.randrange(5, 100) for _ in range(rng.randint(8, 120))] for _ in range(args.rows)]
        mixed = [Encoded(s, lora=t) for s, t in zip(seqs, tags, strict=True)]

        def per_row() -> None:
            loaded.mixed_adapters = "per_row"
            loaded.embed(mixed)

        def grouped() -> None:
            loaded.mixed_adapters = "grouped"
            loaded.embed(mixed)

        timings = {}
        for label, fn in (("per_row_one_forward", per_row), ("grouped_by_adapter", grouped)):
            fn()
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
            timings[label] = best
    ratio = timings["grouped_by_adapter"] / timings["per_row_one_forward"]
    for label, secs in timings.items():
        print(f"{label:22} {secs * 1000:8.1f} ms")
    print(f"grouped / per-row time: {ratio:.2f} (above 1: per-row is faster)")
    out = ROOT / "bench" / "results" / "lora_batching.json"
    out.write_text(
        json.dumps(
            {"rows": args.rows, "threads": args.threads, "seconds": timings, "grouped_over_per_row": ratio}, indent=2
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
