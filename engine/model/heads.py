"""The heads a card declares, applied to one batch's packed hidden states: pooled vectors, token vectors,
sparse weights, relevance scores. Pooling and normalisation happen here and nowhere else.

Each method returns one entry per sequence (CPU, float32) for the task handlers to shape for the wire.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from engine.arch.heads import MLMHead, maxsim, splade_pool, term_weights
from engine.arch.layers import PackedBatch
from engine.arch.pooling import POOLERS, l2_normalize, last_pool
from engine.catalogue.cards import ModelCard
from engine.errors import InvalidInput, ModelLoadFailed
from engine.model.readout import OutputSpec, Readout, Sparse
from engine.model.sequences import Encoded, LateInteraction
from engine.model.tokenizer import TextTokenizer

__all__ = ["CardHeads", "Sparse", "maxsim_scores", "sentence_vectors"]


class CardHeads:
    """The card's head modules with the token ids they need, resolved once at load."""

    def __init__(
        self, card: ModelCard, modules: dict[str, nn.Module], tokenizer: TextTokenizer, late: LateInteraction | None
    ) -> None:
        self.card = card
        self.modules = modules
        self.late = late
        self.specials = tokenizer.special_ids() if card.sparse is not None and card.sparse.kind == "bge_m3" else set()
        self.yes_no_ids: list[int] = []
        if card.score is not None and card.score.kind == "yes_no":
            ids = [tokenizer.token_id(card.score.yes_token), tokenizer.token_id(card.score.no_token)]
            if None in ids:
                raise ModelLoadFailed(
                    f"{card.id}: the tokenizer has no {card.score.yes_token!r} / {card.score.no_token!r} tokens"
                )
            self.yes_no_ids = [int(i) for i in ids if i is not None]

    def read(self, hidden: Tensor, batch: PackedBatch, seqs: list[Encoded], spec: OutputSpec) -> Readout:
        """The outputs `spec` names, one value per sequence of the batch."""
        out = Readout(tokens=batch.num_tokens)
        if "dense" in spec:
            out.dense = list(self.pooled(hidden, batch))
        if "multivector" in spec:
            out.multivector = self.token_vectors(hidden, batch, seqs)
        if "sparse" in spec:
            out.sparse = self.sparse(hidden, batch)
        if "score" in spec:
            out.score = [float(v) for v in self.scores(hidden, batch).tolist()]
        if "logits" in spec:
            out.logits = list(self.logits(hidden, batch))
        return out

    def pooled(self, hidden: Tensor, batch: PackedBatch) -> Tensor:
        """Pooled, not yet normalised sentence vectors. -> [B, hidden] float32 on CPU."""
        return POOLERS[self.card.pooling](hidden.float(), batch).cpu()

    def token_vectors(self, hidden: Tensor, batch: PackedBatch, seqs: list[Encoded]) -> list[Tensor]:
        """Token vectors of each sequence, projected and normalised; documents drop skip-list tokens. -> [n_b, dim]."""
        assert self.late is not None
        spec, skip = self.late.spec, self.late.skip
        x = self.modules["colbert"](hidden) if "colbert" in self.modules else hidden  # [T, dim]
        x = x.float()
        if spec.normalize:
            x = l2_normalize(x)
        bounds = batch.cu_seqlens.tolist()
        skip_ids = torch.tensor(sorted(skip), dtype=torch.long, device=batch.input_ids.device)
        dropped = torch.isin(batch.input_ids, skip_ids)  # [T] skip-list tokens, one vectorised test
        out = []
        for seq, start, end in zip(seqs, bounds[:-1], bounds[1:], strict=True):
            keep = torch.ones(end - start, dtype=torch.bool, device=x.device)
            if spec.skip_first:
                keep[0] = False
            if skip and not seq.query:
                keep &= ~dropped[start:end]
            out.append(x[start:end][keep].cpu())
        return out

    def sparse(self, hidden: Tensor, batch: PackedBatch) -> list[Sparse]:
        """SPLADE vocabulary weights, or BGE-M3 per-term weights, of each sequence."""
        spec = self.card.sparse
        assert spec is not None
        out = []
        if spec.kind == "splade":
            mlm = self.modules["mlm"]
            assert isinstance(mlm, MLMHead)
            for row in splade_pool(mlm, hidden, batch).float().cpu():  # [V]
                ids = torch.nonzero(row).squeeze(1)
                out.append(_top_k(ids.numpy(), row[ids].numpy(), spec.top_k))
            return out
        weights = torch.relu(self.modules["m3_sparse"](hidden)).squeeze(-1).float()  # [T]
        bounds = batch.cu_seqlens.tolist()
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            ids, vals = term_weights(batch.input_ids[start:end], weights[start:end], self.specials)
            out.append(_top_k(ids.cpu().numpy(), vals.cpu().numpy(), spec.top_k))
        return out

    def scores(self, hidden: Tensor, batch: PackedBatch) -> Tensor:
        """Relevance of each (query, document) sequence from a cross-encoder or yes/no head. -> [B]."""
        spec = self.card.score
        assert spec is not None
        if spec.kind == "yes_no":
            logits = self.modules["yes_no"](last_pool(hidden, batch), self.yes_no_ids).float()  # [B, 2]: yes, no
            margin = logits[:, 0] - logits[:, 1]
            return (torch.sigmoid(margin) if spec.activation == "sigmoid" else margin).cpu()
        logits = self.modules["classifier"](hidden, batch).float()  # [B, labels]
        if logits.shape[1] == 1:
            return (torch.sigmoid(logits[:, 0]) if spec.activation == "sigmoid" else logits[:, 0]).cpu()
        if spec.activation == "sigmoid":
            return torch.softmax(logits, dim=1)[:, spec.label].cpu()
        return logits[:, spec.label].cpu()

    def logits(self, hidden: Tensor, batch: PackedBatch) -> Tensor:
        """Every label's logit of each sequence from the classifier head (NLI: entailment, ...). -> [B, labels]."""
        return self.modules["classifier"](hidden, batch).float().cpu()


def sentence_vectors(pooled: Tensor, dims: int | None, normalize: bool) -> Tensor:
    """Pooled rows [B, hidden] -> their first `dims` dimensions (Matryoshka), then unit length when `normalize`
    (the one place sentence vectors are normalised: encode results and zero-shot label matching). -> [B, dims]"""
    full = pooled.shape[1]
    if dims is not None and dims != full:
        if not 0 < dims <= full:
            raise InvalidInput(f"dimensions must be between 1 and {full}, got {dims}")
        pooled = pooled[:, :dims]
    return l2_normalize(pooled) if normalize else pooled


def maxsim_scores(query: Tensor, docs: list[Tensor]) -> list[float]:
    """MaxSim of one query's token vectors against each document's."""
    return [float(maxsim(query, d)) for d in docs]


def _top_k(ids: np.ndarray, values: np.ndarray, k: int | None) -> Sparse:
    if k is not None and len(values) > k:
        best = np.sort(np.argpartition(-values, k - 1)[:k])
        ids, values = ids[best], values[best]
    return ids.astype(np.int32), values.astype(np.float32)
