"""Zero-shot classes for many tasks at once: NLI entailment of a hypothesis per label, or embedding similarity.

NLI (a cross-encoder whose labels include entailment and contradiction): each (item, hypothesis) pair is
one sequence. Single-label scores are a softmax of the entailment logits over the request's labels (they
sum to 1); multi-label scores are each label's own P(entailment) against contradiction. This is the
arithmetic of transformers' zero-shot-classification pipeline.

Embedding (any dense card): the item's vector against each label's (label vectors are cached, bounded).
Single-label scores are a softmax of cosine / temperature over the labels (they sum to 1); multi-label
scores are the cosine similarities themselves.

Either way every sequence of every task shares the same packed batches.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor

from engine.catalogue.cards import ExtractSpec
from engine.model.heads import sentence_vectors
from engine.model.packed import PackedModel
from engine.model.readout import OutputSpec
from engine.model.sequences import Encoded
from engine.tasks.results import Classification
from engine.tasks.task import ExtractParams, Task
from engine.worker.batching import BatchHook, BatchLimits, run_packed

LABEL_CACHE_SIZE = 4096  # label vectors kept per worker (LRU): a fixed bound, whatever the traffic


class LabelVectors:
    """Unit vectors of label texts per model, least recently used dropped first beyond `size` entries."""

    def __init__(self, size: int = LABEL_CACHE_SIZE) -> None:
        self.size = size
        self._vectors: OrderedDict[tuple[str, str], Tensor] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, model: str, text: str) -> Tensor | None:
        vec = self._vectors.get((model, text))
        if vec is None:
            self.misses += 1
            return None
        self.hits += 1
        self._vectors.move_to_end((model, text))
        return vec

    def put(self, model: str, text: str, vec: Tensor) -> None:
        self._vectors[(model, text)] = vec
        self._vectors.move_to_end((model, text))
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)

    def __len__(self) -> int:
        return len(self._vectors)


@dataclass
class Prepared:
    """One task's sequences: NLI pairs (item-major), or the items to embed and its label texts."""

    seqs: list[Encoded]
    label_texts: list[str]


def prepare_nli(model: PackedModel, task: Task, p: ExtractParams) -> Prepared:
    """One (item, hypothesis) pair per item and label, tokenised as the cross-encoder reads pairs."""
    pairs = [(item.text, h) for item in task.items for h in p.hypotheses]
    return Prepared(model.encode_pairs(pairs, p.truncate), [])


def prepare_embedding(model: PackedModel, task: Task, p: ExtractParams) -> Prepared:
    """The items with their prefix, tokenised; the label texts (with the card's query prefix) to look up."""
    texts = [p.prefix + item.text for item in task.items]
    return Prepared(model.encode_texts(texts, p.truncate), [p.label_prefix + h for h in p.hypotheses])


def nli_scores(logits: Tensor, spec: ExtractSpec, multi_label: bool) -> Tensor:
    """[items, labels, classes] logits -> [items, labels] scores (see the module docstring)."""
    if multi_label:
        pair = logits[..., [spec.contradiction_label, spec.entailment_label]]
        return torch.softmax(pair, dim=-1)[..., 1]
    return torch.softmax(logits[..., spec.entailment_label], dim=-1)


def run_nli(
    model: PackedModel, work: list[tuple[Task, Prepared]], limits: BatchLimits, on_batch: BatchHook
) -> list[Tensor]:
    """Each task's [items, labels] scores."""
    spec = model.card.extract
    assert spec is not None and spec.kind == "nli"  # the mode was resolved from this card

    seqs = [s for _, prep in work for s in prep.seqs]
    logits = run_packed(model, seqs, limits, OutputSpec.of("logits"), on_batch).logits
    out, start = [], 0
    for task, prep in work:
        p = _params(task)
        mine = torch.stack(logits[start : start + len(prep.seqs)]).view(len(task.items), len(p.labels), -1)
        start += len(prep.seqs)
        out.append(nli_scores(mine, spec, p.multi_label))
    return out


def run_embedding(
    model: PackedModel,
    work: list[tuple[Task, Prepared]],
    limits: BatchLimits,
    on_batch: BatchHook,
    cache: LabelVectors,
) -> list[Tensor]:
    """Each task's [items, labels] scores; label vectors come from the cache or join the items' batches."""
    card = model.card.id
    known: dict[str, Tensor] = {}
    for _, prep in work:
        for text in prep.label_texts:
            vec = known.get(text)
            if vec is None and (vec := cache.get(card, text)) is not None:
                known[text] = vec
    missing = list(dict.fromkeys(t for _, prep in work for t in prep.label_texts if t not in known))
    label_seqs = model.encode_texts(missing, truncate=True) if missing else []

    item_seqs = [s for _, prep in work for s in prep.seqs]
    pooled = run_packed(model, item_seqs + label_seqs, limits, OutputSpec.of("dense"), on_batch).dense
    vectors = list(sentence_vectors(torch.stack(pooled), None, normalize=True)) if pooled else []
    for text, vec in zip(missing, vectors[len(item_seqs) :], strict=True):
        known[text] = vec
        cache.put(card, text, vec)
    out, start = [], 0
    for task, prep in work:
        p = _params(task)
        items = torch.stack(vectors[start : start + len(prep.seqs)])  # [items, dim]
        start += len(prep.seqs)
        labels = torch.stack([known[t] for t in prep.label_texts])  # [labels, dim]
        cosine = items @ labels.T
        out.append(cosine if p.multi_label else torch.softmax(cosine / p.temperature, dim=-1))
    return out


def classifications(scores: Tensor, p: ExtractParams) -> list[list[Classification]]:
    """Per item, {label, score} best first: every label (single-label) or those at or over the threshold."""
    out = []
    for row in scores.tolist():
        ranked = sorted(zip(p.labels, row, strict=True), key=lambda ls: -ls[1])
        keep = [(label, s) for label, s in ranked if not p.multi_label or s >= p.threshold]
        out.append([Classification(label=label, score=float(s)) for label, s in keep])
    return out


def _params(task: Task) -> ExtractParams:
    assert isinstance(task.params, ExtractParams)  # the dispatch table sends only extract tasks here
    return task.params
