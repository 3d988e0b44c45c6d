"""Which of shoal's own CPU kernels this process uses: the settings' word, handed to the forward passes."""

from __future__ import annotations

from pathlib import Path

from engine.arch import cpu_kernels


def apply_kernels(enabled: bool, cache_dir: Path) -> None:
    """bfloat16 attention and LayerNorm on shoal's CPU kernels (where the CPU can run them) or on torch's;
    builds kept in `cache_dir`."""
    cpu_kernels.configure(enabled, cache_dir)
