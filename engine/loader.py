"""Build a family's module from config.json and load safetensors into it, checking names and shapes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from engine.arch import bert
from engine.checkpoint import read_json
from engine.errors import ModelLoadFailed


def _build_bert(config: dict[str, Any]) -> nn.Module:
    return bert.Bert(bert.BertConfig.from_dict(config))


FAMILIES: dict[str, tuple[Callable[[dict[str, Any]], nn.Module], list[tuple[str, str]], list[str]]] = {
    "bert": (_build_bert, bert.HF_RENAMES, bert.HF_IGNORED),
}


def rename_checkpoint(
    tensors: dict[str, torch.Tensor], renames: list[tuple[str, str]], ignored: list[str]
) -> dict[str, torch.Tensor]:
    """Map checkpoint tensor names onto our module's names, dropping tensors the encoder never uses."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if any(re.search(p, name) for p in ignored):
            continue
        for pattern, repl in renames:
            name = re.sub(pattern, repl, name)
        out[name] = tensor
    return out


def load_state(module: nn.Module, state: dict[str, torch.Tensor], where: Path) -> None:
    """Copy tensors in, refusing missing, unexpected or mis-shaped ones with a message naming them."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [
        f"{k}: checkpoint {tuple(state[k].shape)} vs config {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    problems = []
    if missing:
        problems.append(f"missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
    if wrong:
        problems.append(f"shape mismatch {wrong[:5]}")
    if problems:
        raise ModelLoadFailed(f"weights in {where} do not match config.json: {'; '.join(problems)}")
    module.load_state_dict(state, strict=True)


def load_backbone(family: str, folder: Path, device: str, dtype: torch.dtype) -> nn.Module:
    """The family's module with the folder's safetensors loaded, in eval mode on the device."""
    config = read_json(folder / "config.json")
    if not isinstance(config, dict):
        raise ModelLoadFailed(f"{folder} has no config.json")
    build, renames, ignored = FAMILIES[family]
    try:
        module = build(config)
    except (KeyError, TypeError, ValueError) as e:
        raise ModelLoadFailed(f"{folder}/config.json cannot build a {family} model: {e}") from e
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadFailed(f"{folder} holds no .safetensors weights (only safetensors are loaded)")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    load_state(module, rename_checkpoint(tensors, renames, ignored), folder)
    return module.to(device=device, dtype=dtype).eval()
