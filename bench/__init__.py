"""Benchmarks: each module runs on its own (`python -m bench.NAME`); shared settings live here."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import EngineSettings

CORPUS = Path(__file__).resolve().parent / "data" / "passages.jsonl"  # the encode corpus (bench/make_corpus.py)


def load_corpus(limit: int | None = None) -> list[str]:
    """The texts of the encode corpus, the first `limit` of them (None: all)."""
    texts = [json.loads(line)["text"] for line in CORPUS.read_text().splitlines() if line.strip()]
    return texts[:limit] if limit else texts


def float32_settings() -> EngineSettings:
    """Engine settings for quality benchmarks: float32 with no auto-tune and a fresh profile store, so every run
    embeds with the same vectors whatever an earlier run tuned on this machine (a tune in the background would
    switch precision part way through a run)."""
    from engine.config import EngineSettings

    return EngineSettings(
        auto_tune=False, profile_store=Path(tempfile.mkdtemp(prefix="shoal-bench-")) / "profiles.json"
    )
