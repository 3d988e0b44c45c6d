"""Which of shoal's own CPU kernels this process uses: the settings' word, handed to the forward passes."""

from __future__ import annotations

from pathlib import Path

from engine.arch import cpu_attention


def apply_kernels(enabled: bool, cache_dir: Path) -> None:
    """bfloat16 attention on shoal's CPU kernel (where the CPU can run it) or on torch's; builds kept here."""
    cpu_attention.configure(enabled, cache_dir)
