"""Decoder-only transformers used as encoders (Qwen3-Embedding, Qwen3-Reranker, Llama / SmolLM2).

Causal attention with grouped-query heads (fewer key/value heads than query heads), rotary positions,
RMSNorm before attention and before a SwiGLU MLP, a final RMSNorm. Qwen3 adds RMSNorm on each
query and key head before the rotary step. Pooling is usually the last token.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from torch import Tensor, nn

from engine.arch.bert import num_labels
from engine.arch.heads import ClassifierHead, TokenLogitHead
from engine.arch.layers import GatedMLP, PackedBatch, PreNormBlock, RMSNorm, Rotary, SelfAttention


class DecoderConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10_000.0
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3

    @property
    def max_len(self) -> int:
        return self.max_position_embeddings

    @classmethod
    def from_dict(cls, cfg: dict[str, Any], qk_norm: bool) -> DecoderConfig:
        """Reads rope_theta at the top level (older config.json) or under rope_parameters (newer)."""
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", None):
            raise ValueError(f"rope type {kind!r} is not supported (only plain rotary)")
        if cfg.get("use_sliding_window"):
            raise ValueError("sliding-window decoder layers are not supported")
        theta = rope.get("rope_theta", cfg.get("rope_theta"))
        return cls.model_validate({**cfg, "qk_norm": qk_norm, **({"rope_theta": theta} if theta else {})})


class Decoder(nn.Module):
    """Token embeddings, N causal pre-norm blocks with shared rotary tables, final RMSNorm."""

    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.config = c
        self.max_len = c.max_len
        h, eps = c.hidden_size, c.rms_norm_eps
        head_dim = c.head_dim or h // c.num_attention_heads
        self.tokens = nn.Embedding(c.vocab_size, h)
        self.layers = nn.ModuleList(
            PreNormBlock(
                SelfAttention(
                    h,
                    c.num_attention_heads,
                    c.attention_bias,
                    kv_heads=c.num_key_value_heads,
                    head_dim=head_dim,
                    qk_norm_eps=eps if c.qk_norm else None,
                    causal=True,
                ),
                GatedMLP(h, c.intermediate_size, c.hidden_act, c.mlp_bias),
                RMSNorm(h, eps),
                RMSNorm(h, eps),
            )
            for _ in range(c.num_hidden_layers)
        )
        self.rope = Rotary(head_dim, c.rope_theta)
        self.norm = RMSNorm(h, eps)

    def forward(self, batch: PackedBatch) -> Tensor:
        x = self.tokens(batch.input_ids)  # [T, hidden]
        rope = self.rope(batch.positions, x.dtype)  # ([T, 1, D], [T, 1, D])
        for layer in self.layers:
            x = layer(x, batch, rope)
        return self.norm(x)  # [T, hidden]


def build_qwen3(cfg: dict[str, Any]) -> Decoder:
    return Decoder(DecoderConfig.from_dict(cfg, qk_norm=True))


def build_llama(cfg: dict[str, Any]) -> Decoder:
    return Decoder(DecoderConfig.from_dict(cfg, qk_norm=False))


def classifier(cfg: dict[str, Any]) -> ClassifierHead:
    """*ForSequenceClassification on a decoder: the last token through `score` (no bias)."""
    return ClassifierHead(int(cfg["hidden_size"]), num_labels(cfg), "last", out_bias=False)


def token_logits(cfg: dict[str, Any]) -> TokenLogitHead:
    """*ForCausalLM's lm_head (tied to the embeddings when the checkpoint has none)."""
    return TokenLogitHead(int(cfg["hidden_size"]), int(cfg["vocab_size"]))


HEADS = {"classifier": classifier, "yes_no": token_logits}
TOKEN_EMBEDDING = "tokens.weight"
HF_RENAMES: list[tuple[str, str]] = [
    (r"^model\.", ""),
    (r"^embed_tokens\.", "tokens."),
    (r"^layers\.(\d+)\.input_layernorm\.", r"layers.\1.attn_norm."),
    (r"^layers\.(\d+)\.post_attention_layernorm\.", r"layers.\1.mlp_norm."),
    (r"^layers\.(\d+)\.self_attn\.q_proj\.", r"layers.\1.attn.query."),
    (r"^layers\.(\d+)\.self_attn\.k_proj\.", r"layers.\1.attn.key."),
    (r"^layers\.(\d+)\.self_attn\.v_proj\.", r"layers.\1.attn.value."),
    (r"^layers\.(\d+)\.self_attn\.o_proj\.", r"layers.\1.attn.out."),
    (r"^layers\.(\d+)\.self_attn\.q_norm\.", r"layers.\1.attn.q_norm."),
    (r"^layers\.(\d+)\.self_attn\.k_norm\.", r"layers.\1.attn.k_norm."),
    (r"^layers\.(\d+)\.mlp\.gate_proj\.", r"layers.\1.mlp.gate."),
    (r"^layers\.(\d+)\.mlp\.up_proj\.", r"layers.\1.mlp.up."),
    (r"^layers\.(\d+)\.mlp\.down_proj\.", r"layers.\1.mlp.down."),
]
HF_IGNORED = [r"^lm_head\.", r"^score\.", r"rotary_emb\.inv_freq$"]
HF_HEAD_RENAMES: dict[str, list[tuple[str, str]]] = {
    "classifier": [(r"^score\.", "out.")],
    "yes_no": [(r"^lm_head\.weight$", "weight")],
}
