"""Auto-tuned batch profiles: measure token budgets (and precisions) on this hardware; store the best per (model, device)."""

from __future__ import annotations

import json
import os
import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import torch

from engine.catalogue.cards import ModelCard, Profile
from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.model.loader import load_model
from engine.model.packed import PackedModel
from engine.model.packing import pack_by_budget
from engine.model.precision import DTYPES, dtype_name, profile_slot

BUDGETS = (1024, 2048, 4096, 8192, 16384, 32768)


def device_kind(device: str) -> str:
    """What the profile store keys hardware by: 'cpu', or the CUDA device's name ('cuda-nvidia-h200')."""
    if device.startswith("cuda") and torch.cuda.is_available():
        name = torch.cuda.get_device_name(torch.device(device))
        return "cuda-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return "cpu"


class ProfileStore:
    """A JSON file of tuned profiles keyed '<model>@<device kind>'; writes are atomic."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, model: str, kind: str) -> Profile | None:
        entry = self._read().get(f"{model}@{kind}")
        return Profile.model_validate(entry["profile"]) if entry else None

    def put(self, model: str, kind: str, profile: Profile, report: dict[str, Any]) -> None:
        with self._lock:
            data = self._read()
            data[f"{model}@{kind}"] = {"profile": profile.model_dump(exclude_none=True), "report": report}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=2))
            tmp.replace(self.path)


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


def measure(loaded: PackedModel, seqs: list[list[int]], budget: int, max_items: int) -> dict[str, float]:
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
) -> tuple[Profile, list[dict[str, Any]]]:
    """Measure every (dtype, budget) and pick the fastest whose p99 batch latency is under `latency_ms`
    (the smallest budget within 5% of it, for latency); falls back to the lowest-latency setting."""
    max_len = loaded.tokenizer.max_len
    cuda = loaded.device.startswith("cuda")
    budgets = sorted({b for b in (budgets or BUDGETS) if b >= max_len} or {max_len})
    if dtypes is None:
        dtypes = ["float32", "float16"] + (["bfloat16"] if cuda and torch.cuda.is_bf16_supported() else [])
        dtypes = dtypes if cuda else ["float32"]
    seqs = synthetic_workload(loaded.vocab_size, max_len, requests)
    max_items = loaded.precision.profile.max_batch_items
    original = loaded.dtype
    rows: list[dict[str, Any]] = []
    try:
        for name in dtypes:
            loaded.cast(DTYPES[name])
            for budget in budgets:
                rows.append({"dtype": name, "max_batch_tokens": budget, **measure(loaded, seqs, budget, max_items)})
    finally:
        loaded.cast(original)
    ok = [r for r in rows if r["p99_ms"] <= latency_ms] or [min(rows, key=lambda r: r["p99_ms"])]
    best_speed = max(r["tokens_per_s"] for r in ok)
    best = min((r for r in ok if r["tokens_per_s"] >= 0.95 * best_speed), key=lambda r: r["max_batch_tokens"])
    profile = Profile(max_batch_tokens=best["max_batch_tokens"], max_batch_items=max_items, dtype=best["dtype"])
    return profile, rows


def quick_tune(loaded: PackedModel, store: ProfileStore) -> Profile:
    """A short tune on a model's first load on new hardware (budgets only, small workload); stored."""
    profile, rows = tune(loaded, budgets=[2048, 8192, 16384], dtypes=[dtype_name(loaded.dtype)], requests=64)
    store.put(loaded.card.id, device_kind(loaded.device), profile, {"auto": True, "grid": rows})
    return profile


def tune_model(
    model: str,
    settings: EngineSettings,
    budgets: list[int] | None = None,
    dtypes: list[str] | None = None,
    latency_ms: float = 500.0,
    requests: int = 256,
) -> dict[str, Any]:
    """`shoal tune`: load the model, tune it on this hardware, store the winner; returns the report."""
    card = Catalogue(settings.model_dir).get(model)
    loaded = load_model(card, settings.device, settings.offline)
    profile, rows = tune(loaded, budgets, dtypes, latency_ms, requests)
    kind = device_kind(settings.device)
    report = {"latency_ms": latency_ms, "requests": requests, "grid": rows}
    ProfileStore(settings.profile_store).put(card.id, kind, profile, report)
    return {"model": card.id, "device": kind, "profile": profile.model_dump(exclude_none=True), **report}
