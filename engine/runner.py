"""A loaded model: tokenizer, backbone and pooling composed as its card says."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from engine.arch.layers import PackedBatch
from engine.arch.pooling import POOLERS
from engine.cards import ModelCard
from engine.loader import load_backbone
from engine.tokenize import TextTokenizer, load_tokenizer
from engine.weights import resolve_weights

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class LoadedModel:
    """Everything needed to turn token ids into pooled vectors for one model."""

    card: ModelCard
    tokenizer: TextTokenizer
    backbone: nn.Module
    device: str

    @property
    def dense_dim(self) -> int:
        return int(self.backbone.config.hidden_size)

    def profile_name(self) -> str | None:
        return "cuda" if self.device.startswith("cuda") and "cuda" in self.card.profiles else None

    @torch.inference_mode()
    def hidden_states(self, seqs: list[list[int]]) -> tuple[Tensor, PackedBatch]:
        """Last hidden state of every token. -> [T, hidden] float32, with the packed batch."""
        batch = PackedBatch.from_token_lists(seqs, self.device)
        return self.backbone(batch).float(), batch

    @torch.inference_mode()
    def embed(self, seqs: list[list[int]]) -> Tensor:
        """Pooled, not yet normalised sentence vectors. -> [B, hidden] float32 on CPU."""
        hidden, batch = self.hidden_states(seqs)
        return POOLERS[self.card.pooling](hidden, batch).cpu()


def load_model(card: ModelCard, device: str = "cpu", offline: bool | None = None) -> LoadedModel:
    """Resolve weights, build the backbone, load the tokenizer."""
    folder = resolve_weights(card, offline=offline)
    profile = card.profile("cuda" if device.startswith("cuda") and "cuda" in card.profiles else None)
    dtype = DTYPES[profile.dtype] if device.startswith("cuda") else torch.float32
    backbone = load_backbone(card.family, folder, device, dtype)
    max_len = min(card.max_seq_len, int(backbone.config.max_position_embeddings))
    tokenizer = TextTokenizer(load_tokenizer(folder, max_len), max_len)
    return LoadedModel(card=card, tokenizer=tokenizer, backbone=backbone, device=device)
