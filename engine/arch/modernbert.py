"""ModernBERT (gte-modernbert): rotary positions, pre-norm, GeGLU, no biases, local/global attention.

Every `global_every`-th layer (0, 3, 6, ...) attends to the whole sequence with rotary base
`global_theta`; the others see only tokens within `local_attention // 2` positions on either side,
with base `local_theta`. The first layer has no attention norm (the embeddings were just normalised).
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict
from torch import Tensor, nn

from engine.arch.bert import num_labels
from engine.arch.heads import ClassifierHead, MLMHead
from engine.arch.layers import GatedMLP, LayerNorm, PackedBatch, PreNormBlock, Rotary, SelfAttention


class ModernBertConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    norm_eps: float = 1e-5
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    local_attention: int = 128
    layer_types: list[str]
    global_theta: float = 160_000.0
    local_theta: float = 10_000.0

    @property
    def max_len(self) -> int:
        return self.max_position_embeddings

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> ModernBertConfig:
        """Reads both config.json styles: global_rope_theta/global_attn_every_n_layers or layer_types/rope_parameters."""
        n = int(cfg["num_hidden_layers"])
        every = int(cfg.get("global_attn_every_n_layers", 3))
        types = cfg.get("layer_types") or ["sliding_attention" if i % every else "full_attention" for i in range(n)]
        rope = cfg.get("rope_parameters") or {}
        theta = {
            "global_theta": (rope.get("full_attention") or {}).get("rope_theta", cfg.get("global_rope_theta")),
            "local_theta": (rope.get("sliding_attention") or {}).get("rope_theta", cfg.get("local_rope_theta")),
        }
        return cls.model_validate({**cfg, "layer_types": types, **{k: v for k, v in theta.items() if v}})


class ModernBert(nn.Module):
    """Token embeddings + LayerNorm, N pre-norm blocks (local or global attention), final LayerNorm."""

    def __init__(self, c: ModernBertConfig) -> None:
        super().__init__()
        self.config = c
        self.max_len = c.max_len
        h, eps, nb = c.hidden_size, c.norm_eps, c.norm_bias
        self.tokens = nn.Embedding(c.vocab_size, h)
        self.embed_norm = LayerNorm(h, eps=eps, bias=nb)
        self.layers = nn.ModuleList()
        self.local = [kind == "sliding_attention" for kind in c.layer_types]  # layers that attend in a window
        for i, kind in enumerate(c.layer_types):
            window = c.local_attention // 2 if kind == "sliding_attention" else None
            attn = SelfAttention(h, c.num_attention_heads, c.attention_bias, window=window)
            mlp = GatedMLP(h, c.intermediate_size, c.hidden_activation, c.mlp_bias)
            attn_norm = nn.Identity() if i == 0 else LayerNorm(h, eps=eps, bias=nb)
            self.layers.append(PreNormBlock(attn, mlp, attn_norm, LayerNorm(h, eps=eps, bias=nb)))
        head_dim = h // c.num_attention_heads
        self.global_rope = Rotary(head_dim, c.global_theta)
        self.local_rope = Rotary(head_dim, c.local_theta)
        self.final_norm = LayerNorm(h, eps=eps, bias=nb)

    def forward(self, batch: PackedBatch) -> Tensor:
        x = self.embed_norm(self.tokens(batch.input_ids))  # [T, hidden]
        global_rope = self.global_rope(batch.positions, x.dtype)  # ([T, 1, D], [T, 1, D])
        local_rope = self.local_rope(batch.positions, x.dtype)
        for layer, local in zip(self.layers, self.local, strict=True):
            x = layer(x, batch, local_rope if local else global_rope)
        return self.final_norm(x)  # [T, hidden]


def build(cfg: dict[str, Any]) -> ModernBert:
    return ModernBert(ModernBertConfig.from_dict(cfg))


def classifier(cfg: dict[str, Any]) -> ClassifierHead:
    """ModernBertForSequenceClassification: cls or mean pool -> head (dense, act, norm) -> classifier."""
    c = ModernBertConfig.from_dict(cfg)
    pooling = str(cfg.get("classifier_pooling", "cls"))
    act = str(cfg.get("classifier_activation", "gelu"))
    bias = bool(cfg.get("classifier_bias", False))
    return ClassifierHead(
        c.hidden_size, num_labels(cfg), pooling, act, norm_eps=c.norm_eps, norm_bias=c.norm_bias, dense_bias=bias
    )


def mlm(cfg: dict[str, Any]) -> MLMHead:
    """ModernBertForMaskedLM: head (dense, act, norm) -> decoder tied to the token embeddings."""
    c = ModernBertConfig.from_dict(cfg)
    act = str(cfg.get("classifier_activation", "gelu"))
    bias = bool(cfg.get("classifier_bias", False))
    decoder_bias = bool(cfg.get("decoder_bias", True))
    return MLMHead(
        c.hidden_size, c.vocab_size, act, c.norm_eps, norm_bias=c.norm_bias, dense_bias=bias, decoder_bias=decoder_bias
    )


def split_fused(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Wqkv -> query/key/value and Wi -> gate/up (the first half of Wi is the activated one)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if ".attn.Wqkv." in name:
            for part, chunk in zip(("query", "key", "value"), t.chunk(3, dim=0), strict=True):
                out[name.replace("Wqkv", part)] = chunk
        elif ".mlp.Wi." in name:
            for part, chunk in zip(("gate", "up"), t.chunk(2, dim=0), strict=True):
                out[name.replace("Wi", part)] = chunk
        else:
            out[name] = t
    return out


HEADS = {"classifier": classifier, "mlm": mlm}
TOKEN_EMBEDDING = "tokens.weight"
HF_RENAMES: list[tuple[str, str]] = [
    (r"^model\.", ""),
    (r"^embeddings\.tok_embeddings\.", "tokens."),
    (r"^embeddings\.norm\.", "embed_norm."),
    (r"^layers\.(\d+)\.attn\.Wo\.", r"layers.\1.attn.out."),
    (r"^layers\.(\d+)\.mlp\.Wo\.", r"layers.\1.mlp.down."),
]
HF_IGNORED = [r"^head\.", r"^decoder\.", r"^classifier\."]
HF_HEAD_RENAMES: dict[str, list[tuple[str, str]]] = {
    "classifier": [(r"^head\.", ""), (r"^classifier\.", "out.")],
    "mlm": [(r"^head\.", ""), (r"^decoder\.", "decoder.")],
}
