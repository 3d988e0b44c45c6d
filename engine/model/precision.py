"""The batch profile and precision a model runs with on a device, resolved in one function from one table.

A precision names how the weights run: `float32`, `bfloat16`, `float16` (every float tensor in that dtype),
or `int8` (linear layers' weights int8 per output channel, activations quantised per call; everything else
float32). A device runs the precisions it `supports` (a CPU emulates bfloat16 and float16 slowly) and offers
for tuning only those it runs fast (`available`): a CPU offers bfloat16 only with AVX512-BF16 or AMX, and
int8 where fbgemm's kernels run (x86 with AVX2); CUDA offers float16, and bfloat16 where the GPU supports
it. A profile asking for a precision the device does not support runs in float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

from engine.catalogue.cards import ModelCard, Profile

# precision name -> the dtype of the model's float tensors (int8 quantises the linear layers on top of float32)
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.float32,
}
QUANTIZED = frozenset({"int8"})  # precisions whose linear layers are quantised after the load


@dataclass(frozen=True)
class DeviceProfile:
    """The card profile a device uses (its slot name and settings) and the precision the weights take there."""

    slot: str  # "cuda" or "default"
    profile: Profile
    dtype: torch.dtype
    name: str = "float32"  # the precision (a DTYPES key)

    @property
    def quantized(self) -> bool:
        return self.name in QUANTIZED


def profile_slot(device: str) -> str:
    """The card profile slot a device reads first (and where a tuned profile for it is stored)."""
    return "cuda" if device.startswith("cuda") else "default"


@cache
def cpu_features() -> frozenset[str]:
    """What this CPU has for reduced precision: 'avx512_bf16', 'amx', 'avx512_vnni', 'avx2' (read at run time)."""
    probes = {
        "avx512_bf16": "_is_avx512_bf16_supported",
        "amx": "_is_amx_tile_supported",
        "avx512_vnni": "_is_vnni_supported",
        "avx2": "_is_avx2_supported",
    }
    found = set()
    for name, probe in probes.items():
        fn = getattr(torch.cpu, probe, None)
        if fn is not None and fn():
            found.add(name)
    return frozenset(found)


def available(device: str) -> list[str]:
    """The precisions this device runs fast, float32 first."""
    if device.startswith("cuda"):
        fast = ["float16"] + (["bfloat16"] if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else [])
        return ["float32", *fast]
    features = cpu_features()
    names = ["float32"]
    if "fbgemm" in torch.backends.quantized.supported_engines and "avx2" in features:
        names.append("int8")
    if {"avx512_bf16", "amx"} & features:
        names.append("bfloat16")
    return names


def supported(device: str) -> list[str]:
    """The precisions this device can run at all (fast or not)."""
    if device.startswith("cuda"):
        return available(device)
    return [
        "float32",
        *(["int8"] if "fbgemm" in torch.backends.quantized.supported_engines else []),
        "bfloat16",
        "float16",
    ]


def device_profile(card: ModelCard, device: str, precision: str | None = None) -> DeviceProfile:
    """CUDA uses the card's 'cuda' profile when it has one, everything else the 'default' profile; the
    precision is `precision` when given, else the profile's, and float32 when the device cannot run it."""
    slot = profile_slot(device)
    slot = slot if slot in card.profiles else "default"
    profile = card.profiles[slot]
    name = precision or profile.dtype
    if name not in supported(device):
        name = "float32"
    return DeviceProfile(slot, profile, DTYPES[name], name)


def dtype_name(dtype: torch.dtype) -> str:
    """The profile name of a torch dtype ('float32', ...)."""
    return next(name for name, d in DTYPES.items() if d == dtype)
