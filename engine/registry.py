"""The worker's model registry: the tiered residency manager under its original name."""

from __future__ import annotations

from engine.residency import ResidencyManager as ModelRegistry

__all__ = ["ModelRegistry"]
