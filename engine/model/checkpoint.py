"""Build a family's backbone and the card's heads from config.json; load checkpoint tensors, checking names and shapes."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from engine.arch import bert, decoder, modernbert, xlm_roberta
from engine.arch.heads import Projection
from engine.catalogue.inference import read_json
from engine.errors import ModelLoadFailed

Renames = list[tuple[str, str]]
Converter = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]  # checkpoint tensors -> ours (fused split)


@dataclass
class Family:
    """How to build one architecture and map a Hugging Face checkpoint's tensor names onto it."""

    build: Callable[[dict[str, Any]], nn.Module]
    renames: Renames
    ignored: list[str]
    heads: dict[str, Callable[[dict[str, Any]], nn.Module]] = field(default_factory=dict)
    head_renames: dict[str, Renames] = field(default_factory=dict)
    token_embedding: str = "embeddings.tokens.weight"
    convert: Converter | None = None


def _family(
    module: ModuleType, build: Callable[[dict[str, Any]], nn.Module], convert: Converter | None = None
) -> Family:
    """A family from its arch module's tables (renames, ignored tensors, heads, the token embedding's name)."""
    return Family(
        build,
        module.HF_RENAMES,
        module.HF_IGNORED,
        module.HEADS,
        module.HF_HEAD_RENAMES,
        module.TOKEN_EMBEDDING,
        convert,
    )


def _build_bert(config: dict[str, Any]) -> nn.Module:
    return bert.Bert(bert.BertConfig.from_dict(config))


FAMILIES: dict[str, Family] = {
    "bert": _family(bert, _build_bert),
    "xlm_roberta": _family(xlm_roberta, xlm_roberta.build, convert=xlm_roberta.CONVERT),
    "modernbert": _family(modernbert, modernbert.build, convert=modernbert.split_fused),
    "qwen3": _family(decoder, decoder.build_qwen3),
    "llama": _family(decoder, decoder.build_llama),
}

# Heads any family can carry; their weights sit beside the backbone's (colbert-ir: `linear.*`;
# sentence-transformers / PyLate: `1_Dense/model.safetensors`; BGE-M3: `colbert_linear.pt`, `sparse_linear.pt`).
GENERIC_HEAD_RENAMES: dict[str, Renames] = {
    "colbert": [(r"^(\d+_Dense\.)?linear\.", "proj."), (r"^colbert_linear\.", "proj.")],
    "m3_sparse": [(r"^sparse_linear\.", "proj.")],
}
GENERIC_HEAD_FILES = {"colbert": ["colbert_linear.pt"], "m3_sparse": ["sparse_linear.pt"]}
TIED = {"mlm": "decoder.weight", "yes_no": "weight"}  # output heads that may share the token embeddings
FINAL_RENAMES = [(r"\.gamma$", ".weight"), (r"\.beta$", ".bias")]  # LayerNorm names of old checkpoints


class Composite(nn.Module):
    """The backbone and the heads the card uses, under one state dict (backbone.*, heads.<name>.*)."""

    def __init__(self, backbone: nn.Module, heads: dict[str, nn.Module]) -> None:
        super().__init__()
        self.backbone = backbone
        self.heads = nn.ModuleDict(heads)


def _sub(name: str, renames: Renames) -> str:
    for pattern, repl in renames:
        name = re.sub(pattern, repl, name)
    return name


def rename_checkpoint(
    tensors: dict[str, torch.Tensor],
    renames: Renames,
    ignored: list[str],
    head_renames: dict[str, Renames] | None = None,
) -> dict[str, torch.Tensor]:
    """Map checkpoint names onto ours. Head tensors are claimed first (-> heads.<head>.*); then tensors
    the encoder never uses are dropped; the rest are renamed. Without head_renames the names stay
    unprefixed (the backbone alone)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        claimed = None
        for head, rules in (head_renames or {}).items():
            if any(re.match(p, name) for p, _ in rules):
                claimed = f"heads.{head}." + _sub(name, rules)
                break
        if claimed is not None:
            out[_sub(claimed, FINAL_RENAMES)] = tensor
        elif not any(re.search(p, name) for p in ignored):
            new = _sub(_sub(name, renames), FINAL_RENAMES)
            out[new if head_renames is None else f"backbone.{new}"] = tensor
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
        raise ModelLoadFailed(f"weights in {where} do not match config.json and the card: {'; '.join(problems)}")
    module.load_state_dict(state, strict=True)


def _read_tensors(folder: Path, heads: Mapping[str, object]) -> dict[str, torch.Tensor]:
    """Root safetensors, plus the files only the requested heads use (Dense folders, BGE-M3 .pt heads)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadFailed(f"{folder} holds no .safetensors weights (only safetensors are loaded)")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    if "colbert" in heads:
        for f in sorted(folder.glob("[0-9]*_Dense/model.safetensors")):
            tensors.update({f"{f.parent.name}.{k}": v for k, v in load_file(str(f)).items()})
    for head in heads:
        for name in GENERIC_HEAD_FILES.get(head, []):
            if (folder / name).is_file():  # plain tensors only: weights_only refuses pickled code
                loaded = torch.load(folder / name, map_location="cpu", weights_only=True)
                tensors.update({f"{Path(name).stem}.{k}": v for k, v in loaded.items()})
    return tensors


def _build_head(fam: Family, family: str, head: str, config: dict[str, Any], args: dict[str, object]) -> nn.Module:
    if head in ("colbert", "m3_sparse"):
        asked = args.get("dim")
        dim = (asked if isinstance(asked, int) and asked else int(config["hidden_size"])) if head == "colbert" else 1
        return Projection(int(config["hidden_size"]), dim, bias=bool(args.get("bias", head == "m3_sparse")))
    if head not in fam.heads:
        raise ModelLoadFailed(f"the {family} family has no {head!r} head; it has {sorted(fam.heads)}")
    return fam.heads[head](config)


def load_modules(
    family: str, folder: Path, device: str, dtype: torch.dtype, heads: dict[str, dict[str, object]] | None = None
) -> tuple[nn.Module, dict[str, nn.Module]]:
    """The family's backbone and the named heads (name -> card arguments) with the folder's weights loaded."""
    heads = heads or {}
    config = read_json(folder / "config.json")
    if not isinstance(config, dict):
        raise ModelLoadFailed(f"{folder} has no config.json")
    fam = FAMILIES[family]
    try:
        backbone = fam.build(config)
        head_modules = {h: _build_head(fam, family, h, config, a) for h, a in heads.items()}
    except (KeyError, TypeError, ValueError) as e:
        raise ModelLoadFailed(f"{folder}/config.json cannot build a {family} model: {e}") from e
    module = Composite(backbone, head_modules)
    rules = {h: fam.head_renames.get(h, []) + GENERIC_HEAD_RENAMES.get(h, []) for h in heads}
    state = rename_checkpoint(_read_tensors(folder, heads), fam.renames, fam.ignored, rules)
    if fam.convert is not None:
        try:
            state = fam.convert(state)
        except ValueError as e:  # a fused tensor that cannot be split: the checkpoint's fault, named
            raise ModelLoadFailed(f"weights in {folder} do not match config.json and the card: {e}") from e
    tied = [h for h in heads if h in TIED and f"heads.{h}.{TIED[h]}" not in state]
    for h in tied:  # no output weight in the checkpoint: the head shares the token embeddings
        if f"backbone.{fam.token_embedding}" in state:
            state[f"heads.{h}.{TIED[h]}"] = state[f"backbone.{fam.token_embedding}"]
    load_state(module, state, folder)
    for h in tied:
        owner, _, name = TIED[h].rpartition(".")
        target = head_modules[h].get_submodule(owner) if owner else head_modules[h]
        setattr(target, name, backbone.get_parameter(fam.token_embedding))
    module = module.to(device=device, dtype=dtype).eval().requires_grad_(False)
    return module.backbone, dict(module.heads.items())
