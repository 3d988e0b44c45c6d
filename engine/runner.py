"""A loaded model: tokenizer, backbone and heads composed as its card says."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from engine.arch.layers import PackedBatch
from engine.arch.pooling import POOLERS
from engine.cards import ModelCard, MultivectorSpec
from engine.errors import ModelLoadFailed
from engine.loader import load_modules
from engine.lora import forward as lora_forward
from engine.tokenize import TextTokenizer, load_tokenizer
from engine.weights import resolve_weights

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Encoded:
    """One tokenised input as the backbone reads it."""

    ids: list[int]
    type_ids: list[int] | None = None  # segment ids of a (query, document) pair
    keys: int | None = None  # leading tokens that serve as attention keys (ColBERT expansion); None: all
    query: bool = False
    lora: str | None = None  # LoRA adapter applied to this sequence (engine/lora.py); None: the base model


@dataclass
class LateInteraction:
    """Token ids a multivector card needs: markers, the expansion token, the documents' skip-list."""

    spec: MultivectorSpec
    query_marker: int | None = None
    document_marker: int | None = None
    mask: int | None = None
    skip: set[int] = field(default_factory=set)


@dataclass
class LoadedModel:
    """Everything needed to turn texts into vectors, sparse weights or scores for one model."""

    card: ModelCard
    tokenizer: TextTokenizer
    backbone: nn.Module
    device: str
    heads: dict[str, nn.Module] = field(default_factory=dict)
    late: LateInteraction | None = None
    lora: Any = None  # engine.lora.LoraCache the residency manager binds; None: the process-wide one

    @property
    def dense_dim(self) -> int:
        return int(self.backbone.config.hidden_size)

    @property
    def uses_token_types(self) -> bool:
        return int(getattr(self.backbone.config, "type_vocab_size", 0)) > 1

    def profile_name(self) -> str | None:
        return "cuda" if self.device.startswith("cuda") and "cuda" in self.card.profiles else None

    def encode_texts(self, texts: list[str], truncate: bool, is_query: bool = False) -> list[Encoded]:
        """Token ids of single texts; multivector cards add their markers and query expansion."""
        ids = self.tokenizer(texts, truncate=truncate)
        late = self.late
        if late is None:
            return [Encoded(s, query=is_query) for s in ids]
        marker = late.query_marker if is_query else late.document_marker
        out = []
        for s in ids:
            s = s[:1] + [marker] + s[1:] if marker is not None else s
            keys = None
            n = late.spec.query_length
            if is_query and n and late.mask is not None:
                s = s if len(s) <= n else s[: n - 1] + s[-1:]  # keep the closing special token
                keys = None if late.spec.attend_to_expansion else len(s)
                s = s + [late.mask] * (n - len(s))
            out.append(Encoded(s, keys=keys, query=is_query))
        return out

    def encode_pairs(self, pairs: list[tuple[str, str]], truncate: bool) -> list[Encoded]:
        """Token ids of (query, document) pairs for a cross-encoder."""
        types = self.uses_token_types
        return [Encoded(ids, t if types else None) for ids, t in self.tokenizer.pairs(pairs, truncate)]

    def pack(self, seqs: list[Encoded] | list[list[int]]) -> PackedBatch:
        items = [s if isinstance(s, Encoded) else Encoded(list(s)) for s in seqs]
        types = [s.type_ids or [0] * len(s.ids) for s in items] if any(s.type_ids for s in items) else None
        keys = [len(s.ids) if s.keys is None else s.keys for s in items]
        return PackedBatch.from_token_lists([s.ids for s in items], self.device, types, keys)

    @torch.inference_mode()
    def forward(self, seqs: list[Encoded] | list[list[int]]) -> tuple[Tensor, PackedBatch]:
        """Last hidden state of every token. -> [T, hidden] in the model's dtype, with the packed batch."""
        batch = self.pack(seqs)
        return lora_forward(self, seqs, batch), batch  # the backbone, with each row's LoRA adapter if any

    def hidden_states(self, seqs: list[Encoded] | list[list[int]]) -> tuple[Tensor, PackedBatch]:
        """Last hidden state of every token. -> [T, hidden] float32, with the packed batch."""
        hidden, batch = self.forward(seqs)
        return hidden.float(), batch

    @torch.inference_mode()
    def embed(self, seqs: list[Encoded] | list[list[int]]) -> Tensor:
        """Pooled, not yet normalised sentence vectors. -> [B, hidden] float32 on CPU."""
        hidden, batch = self.hidden_states(seqs)
        return POOLERS[self.card.pooling](hidden.float(), batch).cpu()


def _late_interaction(card: ModelCard, tokenizer: TextTokenizer) -> LateInteraction | None:
    spec = card.multivector
    if spec is None:
        return None
    late = LateInteraction(spec)
    for attr in ("query_marker", "document_marker"):
        token = getattr(spec, attr)
        if token is not None:
            if tokenizer.token_id(token) is None:
                raise ModelLoadFailed(f"{card.id}: the tokenizer has no {attr} token {token!r}")
            setattr(late, attr, tokenizer.token_id(token))
    if spec.query_length:
        late.mask = next(
            (tokenizer.token_id(t) for t in ("[MASK]", "<mask>") if tokenizer.token_id(t) is not None), None
        )
        if late.mask is None:
            raise ModelLoadFailed(f"{card.id}: query expansion needs a [MASK] token and the tokenizer has none")
    chars = string.punctuation if spec.skiplist == "punctuation" else spec.skiplist
    late.skip = {i for i in map(tokenizer.token_id, chars) if i is not None}
    return late


def load_model(card: ModelCard, device: str = "cpu", offline: bool | None = None) -> LoadedModel:
    """Resolve weights, build the backbone and heads, load the tokenizer."""
    folder = resolve_weights(card, offline=offline)
    profile = card.profile("cuda" if device.startswith("cuda") and "cuda" in card.profiles else None)
    dtype = DTYPES[profile.dtype] if device.startswith("cuda") else torch.float32
    backbone, heads = load_modules(card.family, folder, device, dtype, card.heads())
    max_len = min(card.max_seq_len, int(backbone.config.max_len))
    markers = card.multivector is not None and bool(card.multivector.query_marker or card.multivector.document_marker)
    tokenizer = TextTokenizer(load_tokenizer(folder, max_len - int(markers)), max_len)
    late = _late_interaction(card, tokenizer)
    return LoadedModel(card=card, tokenizer=tokenizer, backbone=backbone, device=device, heads=heads, late=late)
