"""flash-attn BERT weight names (Jina's XLM-RoBERTa fork, jina-reranker-v2) onto ours, fused Wqkv split.

flash-attn's `flash_attn/models/bert.py` (`remap_state_dict`) renames a Hugging Face BERT to its own
layout, and Jina's `xlm-roberta-flash-implementation` (the custom code behind jina-reranker-v2's
`auto_map`) is built from the same modules (`block.Block`, `mha.MHA`, `mlp.Mlp`):

| flash-attn / Jina (after `roberta.`)     | Hugging Face                                 | ours                         |
| ---------------------------------------- | -------------------------------------------- | ---------------------------- |
| `emb_ln`                                 | `embeddings.LayerNorm`                       | `embeddings.norm`            |
| `encoder.layers.N.mixer.Wqkv`            | `encoder.layer.N.attention.self.{q,k,v}`     | `layers.N.attn.{q,k,v}`      |
| `encoder.layers.N.mixer.out_proj`        | `encoder.layer.N.attention.output.dense`     | `layers.N.attn.out`          |
| `encoder.layers.N.norm1`                 | `encoder.layer.N.attention.output.LayerNorm` | `layers.N.attn_norm`         |
| `encoder.layers.N.mlp.fc1` / `fc2`       | `intermediate.dense` / `output.dense`        | `layers.N.mlp.up` / `down`   |
| `encoder.layers.N.norm2`                 | `encoder.layer.N.output.LayerNorm`           | `layers.N.mlp_norm`          |

`Wqkv` is `cat([Wq, Wk, Wv], dim=0)` (remap_state_dict; MHA reads it back with
`rearrange("... (three h d) -> ... three h d")`), so it splits into three equal row blocks. The block
is post-norm (`Block(prenorm=False)`), the same maths as our `PostNormBlock`.
"""

from __future__ import annotations

import re

import torch

FLASH_RENAMES: list[tuple[str, str]] = [
    (r"^emb_ln\.", "embeddings.norm."),
    (r"^encoder\.layers\.(\d+)\.mixer\.Wqkv\.", r"layers.\1.attn.Wqkv."),
    (r"^encoder\.layers\.(\d+)\.mixer\.out_proj\.", r"layers.\1.attn.out."),
    (r"^encoder\.layers\.(\d+)\.norm1\.", r"layers.\1.attn_norm."),
    (r"^encoder\.layers\.(\d+)\.mlp\.fc1\.", r"layers.\1.mlp.up."),
    (r"^encoder\.layers\.(\d+)\.mlp\.fc2\.", r"layers.\1.mlp.down."),
    (r"^encoder\.layers\.(\d+)\.norm2\.", r"layers.\1.mlp_norm."),
]
_FUSED = re.compile(r"(?:^|\.)layers\.(\d+)\.attn\.Wqkv\.(weight|bias)$")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _check(layer: str, kind: str, t: torch.Tensor) -> None:
    """A fused projection is [3 * hidden, hidden] (weight) or [3 * hidden] (bias)."""
    weight_ok = t.dim() == 2 and t.shape[0] == 3 * t.shape[1]
    bias_ok = t.dim() == 1 and t.shape[0] % 3 == 0
    if not (weight_ok if kind == "weight" else bias_ok):
        want = "(3 x hidden, hidden)" if kind == "weight" else "(3 x hidden,)"
        raise ValueError(
            f"layer {layer}'s fused mixer.Wqkv.{kind} has shape {tuple(t.shape)}; "
            f"q, k and v stacked along the output dimension are {want}"
        )


def split_wqkv(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Split each renamed `layers.N.attn.Wqkv.*` into query/key/value. A checkpoint in the fused layout must
    have a Wqkv weight and bias in every layer it has; anything else is a ValueError naming the layer."""
    fused = {(m.group(1), m.group(2)) for m in map(_FUSED.search, state) if m}
    if not fused:
        return state  # the Hugging Face layout: nothing to split
    layers = {m.group(1) for m in map(_LAYER.search, state) if m}
    for layer in sorted(layers, key=int):
        absent = [kind for kind in ("weight", "bias") if (layer, kind) not in fused]
        if absent:
            raise ValueError(
                f"the checkpoint fuses q, k and v (mixer.Wqkv) but layer {layer} has no mixer.Wqkv.{absent[0]}"
            )
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        m = _FUSED.search(name)
        if m is None:
            out[name] = t
            continue
        _check(m.group(1), m.group(2), t)
        for part, block in zip(("query", "key", "value"), t.chunk(3, dim=0), strict=True):
            out[name.replace(".Wqkv.", f".{part}.")] = block
    return out
