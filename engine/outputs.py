"""What a forward batch becomes, per sequence: dense vectors, token vectors, sparse weights, scores.

Each function takes the packed hidden states of one batch and the model's heads, and returns one entry
per sequence (CPU, float32) so the encode and score tasks can shape them for the wire.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from engine.arch.heads import maxsim, splade_pool, term_weights
from engine.arch.layers import PackedBatch
from engine.arch.pooling import POOLERS, l2_normalize, last_pool
from engine.runner import Encoded, LoadedModel

Sparse = tuple[np.ndarray, np.ndarray]  # (int32 vocabulary ids ascending, float32 weights)


def dense(model: LoadedModel, hidden: Tensor, batch: PackedBatch) -> Tensor:
    """Pooled, not yet normalised sentence vectors. -> [B, hidden]."""
    return POOLERS[model.card.pooling](hidden, batch).float().cpu()


def multivector(model: LoadedModel, hidden: Tensor, batch: PackedBatch, seqs: list[Encoded]) -> list[Tensor]:
    """Token vectors of each sequence, projected and normalised; documents drop skip-list tokens. -> [n_b, dim]."""
    assert model.late is not None
    spec, skip = model.late.spec, model.late.skip
    x = model.heads["colbert"](hidden) if "colbert" in model.heads else hidden  # [T, dim]
    x = x.float()
    if spec.normalize:
        x = l2_normalize(x)
    bounds = batch.cu_seqlens.tolist()
    out = []
    for seq, start, end in zip(seqs, bounds[:-1], bounds[1:], strict=True):
        keep = torch.ones(end - start, dtype=torch.bool)
        if spec.skip_first:
            keep[0] = False
        if skip and not seq.query:
            keep &= torch.tensor([t not in skip for t in seq.ids])
        out.append(x[start:end][keep.to(x.device)].cpu())
    return out


def _top_k(ids: np.ndarray, values: np.ndarray, k: int | None) -> Sparse:
    if k is not None and len(values) > k:
        best = np.sort(np.argpartition(-values, k - 1)[:k])
        ids, values = ids[best], values[best]
    return ids.astype(np.int32), values.astype(np.float32)


def sparse(model: LoadedModel, hidden: Tensor, batch: PackedBatch, seqs: list[Encoded]) -> list[Sparse]:
    """SPLADE vocabulary weights, or BGE-M3 per-term weights, of each sequence."""
    spec = model.card.sparse
    assert spec is not None
    out = []
    if spec.kind == "splade":
        for row in splade_pool(model.heads["mlm"], hidden, batch).float().cpu():  # [V]
            ids = torch.nonzero(row).squeeze(1)
            out.append(_top_k(ids.numpy(), row[ids].numpy(), spec.top_k))
        return out
    weights = torch.relu(model.heads["m3_sparse"](hidden)).squeeze(-1).float()  # [T]
    specials = model.tokenizer.special_ids()
    bounds = batch.cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        ids, vals = term_weights(batch.input_ids[start:end], weights[start:end], specials)
        out.append(_top_k(ids.cpu().numpy(), vals.cpu().numpy(), spec.top_k))
    return out


def scores(model: LoadedModel, hidden: Tensor, batch: PackedBatch, yes_no_ids: list[int] | None = None) -> Tensor:
    """Relevance of each (query, document) sequence from a cross-encoder head. -> [B]."""
    spec = model.card.score
    assert spec is not None
    if spec.kind == "yes_no":
        assert yes_no_ids is not None
        logits = model.heads["yes_no"](last_pool(hidden, batch), yes_no_ids).float()  # [B, 2]: yes, no
        margin = logits[:, 0] - logits[:, 1]
        return (torch.sigmoid(margin) if spec.activation == "sigmoid" else margin).cpu()
    logits = model.heads["classifier"](hidden, batch).float()  # [B, labels]
    if logits.shape[1] == 1:
        return (torch.sigmoid(logits[:, 0]) if spec.activation == "sigmoid" else logits[:, 0]).cpu()
    if spec.activation == "sigmoid":
        return torch.softmax(logits, dim=1)[:, spec.label].cpu()
    return logits[:, spec.label].cpu()


def maxsim_scores(query: Tensor, docs: list[Tensor]) -> list[float]:
    """MaxSim of one query's token vectors against each document's."""
    return [float(maxsim(query, d)) for d in docs]
