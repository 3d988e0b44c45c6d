"""Auto-tuned profiles: measure token budgets and precisions on this hardware; store the best per (model, device).

A precision other than float32 is measured only once it has passed the quality gate (engine/residency/gate.py)
against the same model in float32; the gate's figures are stored with the profile, and /v1/models and
`shoal models` show them.
"""

from __future__ import annotations

import random
import time

import torch

from engine.catalogue.cards import ModelCard, Profile
from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.model.loader import load_model
from engine.model.packed import PackedModel
from engine.model.packing import pack_by_budget
from engine.model.precision import available, profile_slot
from engine.residency.gate import GateSet, run_gate
from engine.residency.reports import GateFigures, GridRow, Speed, TuneReport, TuneResult
from engine.residency.store import ProfileStore, device_kind, precision_summary

__all__ = [
    "BUDGETS",
    "ProfileStore",
    "apply_profile",
    "device_kind",
    "precision_summary",
    "tune",
    "tune_model",
]
BUDGETS = (1024, 2048, 4096, 8192, 16384, 32768)


def apply_profile(card: ModelCard, profile: Profile, device: str) -> ModelCard:
    """The card with the tuned profile in the slot this device uses ('cuda' on CUDA, else 'default')."""
    slot = profile_slot(device)
    merged = profile.model_copy(update={"lora": card.profiles.get(slot, card.profiles["default"]).lora})
    return card.model_copy(update={"profiles": {**card.profiles, slot: merged}})


def synthetic_workload(vocab: int, max_len: int, n: int = 256, seed: int = 0) -> list[list[int]]:
    """Mixed lengths like real traffic: mostly short queries, some passages, a few full-length documents."""
    rng = random.Random(seed)
    seqs = []
    for _ in range(n):
        r = rng.random()
        hi = min(max_len, 32) if r < 0.6 else min(max_len, 256) if r < 0.9 else max_len
        length = rng.randint(max(2, hi // 4), max(2, hi))
        seqs.append([rng.randrange(5, max(6, vocab)) for _ in range(length)])
    return seqs


def measure(loaded: PackedModel, seqs: list[list[int]], budget: int, max_items: int) -> Speed:
    """Tokens per second over the workload, and per-batch latency p50/p99 (ms), at one token budget."""
    batches = pack_by_budget([len(s) for s in seqs], budget, max_items)
    loaded.embed([seqs[i] for i in batches[0]])  # warm-up
    times = []
    started = time.perf_counter()
    for batch in batches:
        t0 = time.perf_counter()
        loaded.embed([seqs[i] for i in batch])
        if loaded.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - started
    times.sort()
    tokens = sum(len(s) for s in seqs)
    return {
        "tokens_per_s": tokens / total,
        "p50_ms": times[len(times) // 2] * 1000,
        "p99_ms": times[min(len(times) - 1, int(0.99 * len(times)))] * 1000,
    }


def tune(
    loaded: PackedModel,
    budgets: list[int] | None = None,
    dtypes: list[str] | None = None,
    latency_ms: float = 500.0,
    requests: int = 256,
    gate_set: GateSet | None = None,
) -> tuple[Profile, list[GridRow], dict[str, GateFigures]]:
    """Gate every precision against `loaded` (float32), measure every (precision, budget) that passed, and pick
    the fastest whose p99 batch latency is under `latency_ms` (the smallest budget within 5% of it, for
    latency); falls back to the lowest-latency setting. -> (profile, grid rows, gate figures per precision).

    `dtypes` defaults to every precision the device offers; a model loaded in another precision than float32
    can be tuned only in its own precision, ungated. (A first load's background tune is engine/residency/autotune.py.)"""
    max_len = loaded.tokenizer.max_len
    budgets = sorted({b for b in (budgets or BUDGETS) if b >= max_len} or {max_len})
    names = dtypes or available(loaded.device)
    seqs = synthetic_workload(loaded.vocab_size, max_len, requests)
    max_items = loaded.precision.profile.max_batch_items
    rows: list[GridRow] = []
    gates: dict[str, GateFigures] = {}
    for name in names:
        model = loaded if name == loaded.precision.name else loaded.variant(name)
        if name != "float32" and loaded.precision.name == "float32":
            result = run_gate(loaded, model, gate_set)
            gates[name] = result.as_dict()
            if not result.passed:
                continue  # never offered: not worth measuring
        for budget in budgets:
            speed = measure(model, seqs, budget, max_items)
            rows.append(
                GridRow(
                    dtype=name,
                    max_batch_tokens=budget,
                    tokens_per_s=speed["tokens_per_s"],
                    p50_ms=speed["p50_ms"],
                    p99_ms=speed["p99_ms"],
                )
            )
    ok = [r for r in rows if r["p99_ms"] <= latency_ms] or [min(rows, key=lambda r: r["p99_ms"])]
    best_speed = max(r["tokens_per_s"] for r in ok)
    best = min((r for r in ok if r["tokens_per_s"] >= 0.95 * best_speed), key=lambda r: r["max_batch_tokens"])
    profile = Profile(max_batch_tokens=best["max_batch_tokens"], max_batch_items=max_items, dtype=best["dtype"])
    return profile, rows, gates


def tune_model(
    model: str,
    settings: EngineSettings,
    budgets: list[int] | None = None,
    dtypes: list[str] | None = None,
    latency_ms: float = 500.0,
    requests: int = 256,
) -> TuneResult:
    """`shoal tune`: load the model in float32, gate and measure its precisions on this hardware, store the
    winner with the gate figures; returns the report."""
    card = Catalogue(settings.model_dir).get(model)
    loaded = load_model(card, settings.device, settings.offline, precision="float32")
    profile, rows, gates = tune(loaded, budgets, dtypes, latency_ms, requests)
    kind = device_kind(settings.device)
    report: TuneReport = {"latency_ms": latency_ms, "requests": requests, "grid": rows, "gates": gates}
    ProfileStore(settings.profile_store).put(card.id, kind, profile, report)
    return {"model": card.id, "device": kind, "profile": profile.model_dump(exclude_none=True), **report}
