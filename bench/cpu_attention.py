"""CPU attention: shoal's bfloat16 kernel (engine/arch/cpu_kernels.py) against torch's SDPA, in one run.

On the encode corpus with all-MiniLM-L6-v2 in bfloat16 (a CPU with AVX512-BF16), the corpus cut into batches
at the CPU profile's token budget:

- attention alone: random q, k, v of each batch's shape through both paths, GFLOP/s of useful attention work
  (4 x length^2 x head size x heads per sequence), and the largest difference from a float32 reference;
- the whole forward pass with the kernel on and off, rounds interleaved, passages/s and the ratio;
- scaling: the kernel's time per FLOP at 1x, 4x and 16x one batch's sequences (should stay flat).

    .venv/bin/python bench/cpu_kernels.py [--threads 2] [--rounds 5] [--limit 400]

Writes bench/results/cpu_kernels.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from bench import load_corpus  # noqa: E402
from bench.token_buckets import MODEL, fresh_batches, interleaved_rounds  # noqa: E402
from engine.arch import cpu_kernels  # noqa: E402
from engine.arch.layers import PackedBatch, varlen_attention  # noqa: E402
from engine.catalogue.catalogue import Catalogue  # noqa: E402
from engine.model.loader import load_model  # noqa: E402
from engine.model.packed import PackedModel  # noqa: E402
from engine.model.sequences import Encoded  # noqa: E402


def attention_flops(lengths: list[int], heads: int, head_dim: int) -> int:
    return sum(4 * n * n * head_dim * heads for n in lengths)


def timed(fn: object, min_s: float = 0.5) -> float:
    """Seconds per call: the best of repeated calls over at least min_s."""
    assert callable(fn)
    fn()
    best, started = float("inf"), time.perf_counter()
    while time.perf_counter() - started < min_s:
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def attention_alone(batches: list[list[int]], heads: int, head_dim: int) -> dict[str, float]:
    """GFLOP/s of both paths over the given batches' lengths, and their worst error against float32."""
    seconds = {"kernel": 0.0, "sdpa": 0.0}
    flops, worst = 0, {"kernel": 0.0, "sdpa": 0.0}
    for lengths in batches:
        batch = PackedBatch.from_token_lists([[1] * n for n in lengths])
        q, k, v = (torch.randn(sum(lengths), heads, head_dim).bfloat16() for _ in range(3))
        reference = varlen_attention(q.float(), k.float(), v.float(), batch)
        for path in ("kernel", "sdpa"):
            cpu_kernels.configure(path == "kernel")
            seconds[path] += timed(lambda b=batch, q=q, k=k, v=v: varlen_attention(q, k, v, b), 0.2)
            err = (varlen_attention(q, k, v, batch).float() - reference).abs().max().item()
            worst[path] = max(worst[path], err)
        flops += attention_flops(lengths, heads, head_dim)
    cpu_kernels.configure(True)
    return {f"{p}_gflops": flops / s / 1e9 for p, s in seconds.items()} | {f"{p}_max_err": e for p, e in worst.items()}


def scaling(lengths: list[int], heads: int, head_dim: int) -> dict[str, float]:
    """Kernel nanoseconds per useful FLOP with the batch's sequences repeated 1, 4 and 16 times."""
    out = {}
    for times in (1, 4, 16):
        seqs = lengths * times
        batch = PackedBatch.from_token_lists([[1] * n for n in seqs])
        q, k, v = (torch.randn(sum(seqs), heads, head_dim).bfloat16() for _ in range(3))
        s = timed(lambda b=batch, q=q, k=k, v=v: varlen_attention(q, k, v, b))
        out[f"x{times}_ns_per_kflop"] = s / attention_flops(seqs, heads, head_dim) * 1e12
    return out


def whole_forward(model: PackedModel, encoded: list[Encoded], rounds: int) -> dict[str, list[float]]:
    """passages/s of MiniLM's bf16 forward with the kernel and with torch's SDPA, rounds interleaved."""
    model.forward(encoded[:16])
    arms = {"kernel": lambda: cpu_kernels.configure(True), "sdpa": lambda: cpu_kernels.configure(False)}
    runs = interleaved_rounds(model, encoded, arms, rounds, lambda r, _arm: r)  # both arms: the same batches
    cpu_kernels.configure(True)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the whole forward")
    ap.add_argument("--limit", type=int, default=400, help="passages of bench/data/passages.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not cpu_kernels.ready():
        sys.exit("this CPU has no AVX512-BF16 (or no C++ compiler): the kernel does not run here")
    texts = load_corpus(args.limit)
    model = load_model(Catalogue().get(MODEL), "cpu", precision="bfloat16")
    heads = int(model.config.num_attention_heads)
    head_dim = model.dense_dim // heads
    encoded = model.encode_texts(texts, truncate=True)
    batches = [[len(s.ids) for s in b] for b in fresh_batches(encoded, 0)]
    alone = attention_alone(batches, heads, head_dim)
    print(
        f"attention alone ({len(batches)} batches, {heads} heads of {head_dim}): kernel {alone['kernel_gflops']:.1f} "
        f"GFLOP/s, torch SDPA {alone['sdpa_gflops']:.1f} ({alone['kernel_gflops'] / alone['sdpa_gflops']:.2f}x); "
        f"max error vs float32: kernel {alone['kernel_max_err']:.4f}, SDPA {alone['sdpa_max_err']:.4f}",
        flush=True,
    )
    scale = scaling(batches[0], heads, head_dim)
    print("scaling, ns per kFLOP at 1x / 4x / 16x one batch: " + " / ".join(f"{v:.2f}" for v in scale.values()))
    runs = whole_forward(model, encoded, args.rounds)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(
        f"bf16 forward: kernel {med['kernel']:.1f} passages/s (best {max(runs['kernel']):.1f}), SDPA "
        f"{med['sdpa']:.1f} (best {max(runs['sdpa']):.1f}): {med['kernel'] / med['sdpa']:.2f}x median",
        flush=True,
    )
    out = ROOT / "bench" / "results" / "cpu_kernels.json"
    out.parent.mkdir(exist_ok=True)
    report = {"threads": args.threads, "passages": len(texts), "attention": alone, "scaling": scale, "forward": runs}
    out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
