"""BERT encoder (absolute or rotary positions, post-norm LayerNorm, GELU MLP) over a packed batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from engine.arch.heads import ClassifierHead, MLMHead
from engine.arch.layers import LayerNorm, PackedBatch, PostNormBlock, Rotary


@dataclass
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    position_offset: int = 0  # XLM-R counts positions from padding_idx + 1
    rotary_base: float | None = None  # rotary positions (Jina's XLM-R fork) instead of a position table

    @property
    def max_len(self) -> int:
        return self.max_position_embeddings - self.position_offset

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> BertConfig:
        kind = cfg.get("position_embedding_type", "absolute")
        if kind not in ("absolute", "rotary"):
            raise ValueError(f"position_embedding_type {kind!r} is not supported")
        c = cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg and k != "rotary_base"})
        if kind == "rotary":
            c.rotary_base = rotary_base(cfg, c.head_dim)
        return c


def rotary_base(cfg: dict[str, Any], head_dim: int) -> float:
    """The rotary base of Jina's XLM-R fork (its create_mixer_cls: flash-attn RotaryEmbedding over the whole
    head, base `rotary_emb_base`, halves rotated unless `rotary_emb_interleaved`); other variants refused."""
    if "rotary_emb_base" not in cfg:
        raise ValueError("position_embedding_type 'rotary' needs rotary_emb_base")
    if int(cfg.get("rotary_emb_dim") or head_dim) != head_dim:
        raise ValueError(f"rotary_emb_dim {cfg['rotary_emb_dim']} (partial rotary) is not supported")
    if cfg.get("rotary_emb_interleaved") or cfg.get("rotary_emb_scale_base") is not None:
        raise ValueError("interleaved or scaled (xPos) rotary embeddings are not supported")
    return float(cfg["rotary_emb_base"])


class BertEmbeddings(nn.Module):
    """Token + absolute position (none with rotary positions) + token type lookups, then LayerNorm."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.positions = nn.Embedding(c.max_position_embeddings, c.hidden_size) if c.rotary_base is None else None
        self.token_types = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.norm = LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.offset = c.position_offset

    def forward(self, batch: PackedBatch) -> Tensor:
        x = self.tokens(batch.input_ids)
        if self.positions is not None:
            x = x + self.positions(batch.positions + self.offset)
        return self.norm(x + self.token_types(batch.token_type_ids))  # [T, hidden]


class Bert(nn.Module):
    """Embeddings, then N post-norm blocks; returns the last hidden state of every real token."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.config = c
        self.embeddings = BertEmbeddings(c)
        self.layers = nn.ModuleList(
            PostNormBlock(c.hidden_size, c.num_attention_heads, c.intermediate_size, c.hidden_act, c.layer_norm_eps)
            for _ in range(c.num_hidden_layers)
        )
        self.rotary = Rotary(c.head_dim, c.rotary_base) if c.rotary_base is not None else None

    def forward(self, batch: PackedBatch) -> Tensor:
        x = self.embeddings(batch)  # [T, hidden]
        # rotary positions count from 0 in each sequence (no padding offset)
        rope = self.rotary(batch.positions, x.dtype) if self.rotary is not None else None
        for layer in self.layers:
            x = layer(x, batch, rope)
        return x  # [T, hidden]


def num_labels(cfg: dict[str, Any]) -> int:
    """Output count of a *ForSequenceClassification checkpoint."""
    return len(cfg["id2label"]) if cfg.get("id2label") else int(cfg.get("num_labels", 2))


def classifier(cfg: dict[str, Any]) -> ClassifierHead:
    """BertForSequenceClassification: CLS -> pooler (dense, tanh) -> classifier."""
    return ClassifierHead(int(cfg["hidden_size"]), num_labels(cfg), "cls", "tanh")


def mlm(cfg: dict[str, Any]) -> MLMHead:
    """BertForMaskedLM: cls.predictions (dense, activation, LayerNorm, decoder tied to word embeddings)."""
    c = BertConfig.from_dict(cfg)
    return MLMHead(c.hidden_size, c.vocab_size, c.hidden_act, c.layer_norm_eps)


HEADS = {"classifier": classifier, "mlm": mlm}
TOKEN_EMBEDDING = "embeddings.tokens.weight"  # where tied output heads take their weight

# Hugging Face checkpoint names -> ours (regex, replacement), applied in order.
HF_RENAMES: list[tuple[str, str]] = [
    (r"^(bert|model)\.", ""),
    (r"^embeddings\.word_embeddings\.", "embeddings.tokens."),
    (r"^embeddings\.position_embeddings\.", "embeddings.positions."),
    (r"^embeddings\.token_type_embeddings\.", "embeddings.token_types."),
    (r"^embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.", r"layers.\1.attn.\2."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attn.out."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attn_norm."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.mlp.up."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.mlp.down."),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.mlp_norm."),
    # LayerNorm weights in very old checkpoints
    (r"\.gamma$", ".weight"),
    (r"\.beta$", ".bias"),
]
# Checkpoint tensors we never use in an encoder (pooler, MLM/NSP heads, buffers).
HF_IGNORED = [r"^(bert\.)?pooler\.", r"^cls\.", r"^classifier\.", r"position_ids$"]
# Head tensors, claimed before the backbone renames when the card uses that head.
HF_HEAD_RENAMES: dict[str, list[tuple[str, str]]] = {
    "classifier": [(r"^(bert\.)?pooler\.dense\.", "dense."), (r"^classifier\.", "out.")],
    "mlm": [
        (r"^cls\.predictions\.transform\.dense\.", "dense."),
        (r"^cls\.predictions\.transform\.LayerNorm\.", "norm."),
        (r"^cls\.predictions\.decoder\.", "decoder."),
        (r"^cls\.predictions\.bias$", "decoder.bias"),
    ],
}
