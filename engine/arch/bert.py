"""BERT encoder (absolute positions, post-norm LayerNorm, GELU MLP) over a packed batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from engine.arch.heads import ClassifierHead, MLMHead
from engine.arch.layers import PackedBatch, PostNormBlock


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

    @property
    def max_len(self) -> int:
        return self.max_position_embeddings - self.position_offset

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> BertConfig:
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"position_embedding_type {cfg['position_embedding_type']!r} is not supported")
        return cls(**{k: cfg[k] for k in cls.__dataclass_fields__ if k in cfg})


class BertEmbeddings(nn.Module):
    """Token + absolute position + token type lookups, then LayerNorm."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.positions = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_types = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.offset = c.position_offset

    def forward(self, batch: PackedBatch) -> Tensor:
        x = self.tokens(batch.input_ids) + self.positions(batch.positions + self.offset)
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

    def forward(self, batch: PackedBatch) -> Tensor:
        x = self.embeddings(batch)  # [T, hidden]
        for layer in self.layers:
            x = layer(x, batch)
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
