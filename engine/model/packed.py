"""PackedModel: one of our backbones with its tokenizer and heads, behind the narrow interface handlers use.

Handlers may tokenize (`encode_texts`, `encode_pairs`, `tokenizer`), check an adapter (`use_adapter`), and ask
for one packed batch's outputs (`read`: the forward pass with each sequence's LoRA adapter, then the heads the
card declares for the outputs named). Residency sees the LoadedModel protocol: card, device, precision, tensor bytes, move_to.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from threading import Event
from typing import Literal

import torch
from torch import Tensor, nn

from engine.arch.bert import BertConfig
from engine.arch.configs import BackboneConfig, config_of
from engine.arch.layers import PackedBatch, token_bucket
from engine.catalogue.cards import ModelCard
from engine.catalogue.weights import resolve_adapter
from engine.errors import InvalidInput
from engine.metrics import timed
from engine.model import lora, memory
from engine.model.checkpoint import FAMILIES
from engine.model.heads import CardHeads
from engine.model.packing import pack_by_budget
from engine.model.precision import DeviceProfile, cpu_features, device_profile, supported
from engine.model.quantize import quantize_linears
from engine.model.readout import OutputSpec, Readout
from engine.model.sequences import Encoded, LateInteraction
from engine.model.tokenizer import TextTokenizer

Sequences = list[Encoded] | list[list[int]]

# Pad CPU batches to token buckets only where oneDNN's per-row-count kernels cost a first call: on AMX a bf16
# linear's first call with a new row count ran at 185-345 GFLOP/s against 700-750 later (bf16 forward +15% on
# fresh batch shapes); on AVX512-BF16 without AMX the first call ran at 0.94-0.97x a later one, so the filler's
# extra tokens were pure cost (bf16 0.96-0.98x). bench/token_buckets.py measures both; it flips this.
PAD_TO_BUCKETS = "amx" in cpu_features()


class ReadCancelled(Exception):
    """`read_all` stopped before its next batch: the caller's cancel flag was set."""


@dataclass
class PackedModel:
    """Everything needed to turn texts into vectors, sparse weights or scores for one model."""

    card: ModelCard
    tokenizer: TextTokenizer
    backbone: nn.Module
    heads: CardHeads
    device: str
    precision: DeviceProfile
    adapters: lora.AdapterCache = field(default_factory=lora.AdapterCache)
    late: LateInteraction | None = None
    # How a batch mixing adapters runs: "grouped" (one forward per adapter, rows stitched back) or "per_row"
    # (one forward, each adapter's delta added to its own rows). bench/lora_batching.py measured grouped faster.
    mixed_adapters: Literal["grouped", "per_row"] = "grouped"

    # -- the LoadedModel protocol ------------------------------------------------------------------

    def modules(self) -> list[nn.Module]:
        return [self.backbone, *self.heads.modules.values()]

    def tensor_bytes(self) -> int:
        return memory.tensor_bytes(self.modules())

    def move_to(self, device: str) -> None:
        if device != self.device:
            memory.move_modules(self.modules(), device)
            self.device = device

    # -- what the model is -------------------------------------------------------------------------

    @property
    def max_len(self) -> int:
        return self.tokenizer.max_len

    @property
    def config(self) -> BackboneConfig:
        """The backbone's typed config (each family's own class)."""
        return config_of(self.backbone)

    @property
    def dense_dim(self) -> int:
        return int(self.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def uses_token_types(self) -> bool:
        config = self.config
        return isinstance(config, BertConfig) and config.type_vocab_size > 1

    @property
    def dtype(self) -> torch.dtype:
        return next(self.backbone.parameters()).dtype

    def cast(self, dtype: torch.dtype) -> None:
        """Change the dtype of every module's float tensors."""
        for module in self.modules():
            module.to(dtype)

    def variant(self, precision: str) -> PackedModel:
        """A copy of this (float32) model in another precision of its device, sharing the tokenizer and the
        adapters: what the quality gate compares and tuning measures."""
        profile = device_profile(self.card, self.device, precision)
        if profile.name != precision:
            raise InvalidInput(f"{self.device} cannot run precision {precision!r}; it runs {supported(self.device)}")
        backbone = copy.deepcopy(self.backbone).to(profile.dtype)
        modules = {name: copy.deepcopy(m).to(profile.dtype) for name, m in self.heads.modules.items()}
        if profile.quantized:
            quantize_linears(backbone)
        heads = copy.copy(self.heads)
        heads.modules = modules
        return dataclasses.replace(self, backbone=backbone, heads=heads, precision=profile)

    # -- tokenising --------------------------------------------------------------------------------

    def encode_texts(self, texts: list[str], truncate: bool, is_query: bool = False) -> list[Encoded]:
        """Token ids of single texts; multivector cards add their markers and query expansion."""
        ids = self.tokenizer(texts, truncate=truncate)
        if self.late is None:
            return [Encoded(s, query=is_query) for s in ids]
        return [self.late.mark(s, is_query) for s in ids]

    def encode_pairs(self, pairs: list[tuple[str, str]], truncate: bool) -> list[Encoded]:
        """Token ids of (query, document) pairs for a cross-encoder."""
        types = self.uses_token_types
        return [Encoded(ids, t if types else None) for ids, t in self.tokenizer.pairs(pairs, truncate)]

    # -- adapters and the forward pass -------------------------------------------------------------

    def use_adapter(self, name: str) -> lora.Adapter:
        """The LoRA adapter `name`, loaded (cached) and hooked into the backbone; raises if it is unusable."""

        _, folder = resolve_adapter(self.card, name, self.adapters.policy)

        def read() -> lora.Adapter:
            renames = FAMILIES[self.card.family].renames
            return lora.read_adapter(name, folder, renames, self.device, self.dtype)

        adapter = self.adapters.get(self.card.id, folder, read, self.precision.name)
        lora.install(self.backbone, adapter)
        return adapter

    def pack(self, seqs: Sequences) -> PackedBatch:
        items = _encoded(seqs)
        types = [s.type_ids or [0] * len(s.ids) for s in items] if any(s.type_ids for s in items) else None
        keys = [len(s.ids) if s.keys is None else s.keys for s in items]
        return PackedBatch.from_token_lists([s.ids for s in items], self.device, types, keys)

    @torch.inference_mode()
    def forward(self, seqs: Sequences) -> tuple[Tensor, PackedBatch]:
        """Last hidden state of every token, each sequence through its own LoRA adapter (if any).
        -> [T, hidden] in the model's dtype, with the packed batch."""
        items = _encoded(seqs)
        with timed("batch"):
            batch = self.pack(items)
        names = [s.lora for s in items]
        if self.mixed_adapters == "per_row" or len(set(names)) <= 1:
            with lora.active(self._adapters(names), batch), timed("forward"):
                return self._backbone(batch), batch
        bounds = batch.cu_seqlens.tolist()
        out: Tensor | None = None
        for name in dict.fromkeys(names):  # one forward per adapter, rows written back in place
            idx = [i for i, n in enumerate(names) if n == name]
            part = self.pack([items[i] for i in idx])
            with lora.active(self._adapters([name] * len(idx)), part), timed("forward"):
                hidden = self._backbone(part)
            if out is None:
                out = hidden.new_empty((batch.num_tokens, hidden.shape[1]))
            rows = torch.cat([torch.arange(bounds[i], bounds[i + 1]) for i in idx]).to(hidden.device)
            out[rows] = hidden
        assert out is not None
        return out, batch

    def _backbone(self, batch: PackedBatch) -> Tensor:
        """The backbone over `batch`, on an AMX CPU with a filler sequence bringing it to a token bucket (oneDNN's
        kernels are cached per row count, engine/arch/layers.py: token_bucket). -> [T, hidden], real tokens."""
        if self.device != "cpu" or not PAD_TO_BUCKETS:
            return self.backbone(batch)
        return self.backbone(batch.with_filler(token_bucket(batch.num_tokens)))[: batch.num_tokens]

    def _adapters(self, names: list[str | None]) -> list[lora.Adapter | None]:
        cache = {n: self.use_adapter(n) for n in dict.fromkeys(names) if n}
        return [cache[n] if n else None for n in names]

    @torch.inference_mode()
    def read(self, seqs: list[Encoded], spec: OutputSpec) -> Readout:
        """One packed batch, asked once: the forward pass, then the heads for the outputs `spec` names."""
        hidden, batch = self.forward(seqs)  # [T, hidden]
        with timed("postprocess"):
            return self.heads.read(hidden, batch, seqs, spec)

    @torch.inference_mode()
    def read_all(
        self, seqs: list[Encoded], spec: OutputSpec, max_tokens: int, max_items: int, cancel: Event | None = None
    ) -> tuple[Readout, list[tuple[int, int]]]:
        """The outputs `spec` names of every sequence, in `seqs` order: shortest first in packed batches under
        `max_tokens` and `max_items`, each batch one `read`; and each batch's (items, tokens). ReadCancelled
        before a batch once `cancel` is set. The worker's handlers and the quality gate both read through this,
        so the gate measures what serves."""
        parts: list[Readout] = []
        order: list[int] = []
        sizes: list[tuple[int, int]] = []
        for batch in pack_by_budget([len(s.ids) for s in seqs], max_tokens, max_items):
            if cancel is not None and cancel.is_set():
                raise ReadCancelled
            part = self.read([seqs[i] for i in batch], spec)
            parts.append(part)
            order.extend(batch)
            sizes.append((len(batch), part.tokens))
        return Readout.gather(parts, order), sizes

    @torch.inference_mode()
    def embed(self, seqs: Sequences) -> Tensor:
        """Pooled, not yet normalised sentence vectors. -> [B, hidden] float32 on CPU."""
        hidden, batch = self.forward(seqs)
        return self.heads.pooled(hidden, batch)


def _encoded(seqs: Sequences) -> list[Encoded]:
    return [s if isinstance(s, Encoded) else Encoded(list(s)) for s in seqs]
