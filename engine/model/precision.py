"""The batch profile and dtype a model runs with on a device, resolved in one function from one table."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.catalogue.cards import ModelCard, Profile

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class DeviceProfile:
    """The card profile a device uses (its slot name and settings) and the dtype the weights take there."""

    slot: str  # "cuda" or "default"
    profile: Profile
    dtype: torch.dtype


def profile_slot(device: str) -> str:
    """The card profile slot a device reads first (and where a tuned profile for it is stored)."""
    return "cuda" if device.startswith("cuda") else "default"


def device_profile(card: ModelCard, device: str) -> DeviceProfile:
    """CUDA uses the card's 'cuda' profile when it has one, in that profile's dtype; everything else the
    'default' profile in float32."""
    slot = profile_slot(device)
    slot = slot if slot in card.profiles else "default"
    profile = card.profiles[slot]
    dtype = DTYPES[profile.dtype] if device.startswith("cuda") else torch.float32
    return DeviceProfile(slot, profile, dtype)


def dtype_name(dtype: torch.dtype) -> str:
    """The profile name of a torch dtype ('float32', ...)."""
    return next(name for name, d in DTYPES.items() if d == dtype)
