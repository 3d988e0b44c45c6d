"""The quality gate a reduced-precision profile passes before it is offered for a model.

The candidate runs the shipped gate set (data/gate.jsonl: 64 passages on 16 topics, four close ones per
topic, and 128 queries that each name the one passage answering them) next to the same model in float32:

- cosine between the candidate's and float32's outputs, at least MIN_COSINE on average over every text and
  at least MIN_WORST_COSINE on each one (dense vectors; SPLADE vocabulary weights; token vectors, token by
  token; a cross-encoder's scores over all pairs, each side centred on its mean, i.e. their correlation);
- nDCG@10 of the queries over the passages (an embedder retrieves from all 64; a cross-encoder re-ranks the
  eight passages of the query's topic and the next one) drops by at most MAX_NDCG_DROP.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch import Tensor

from engine.errors import InvalidInput
from engine.model.heads import maxsim_scores, sentence_vectors
from engine.model.packed import PackedModel, ReadCancelled
from engine.model.readout import OutputSpec, Readout
from engine.model.sequences import Encoded
from engine.residency.reports import GateFigures
from engine.residency.stop import TuneStopped

GATE_SET = Path(__file__).parent / "data" / "gate.jsonl"
MIN_COSINE = 0.995  # mean over the gate set's texts
MIN_WORST_COSINE = 0.99  # every single text
MAX_NDCG_DROP = 0.01
MAX_ITEMS = 256  # sequences one gate batch may take (a worker's default item cap)


@dataclass(frozen=True)
class GateSet:
    """Passages, queries, and for each query the indices of its relevant passages."""

    passage_ids: list[str]
    passages: list[str]
    queries: list[str]
    relevant: list[frozenset[int]]

    def topic(self, passage: int) -> str:
        return self.passage_ids[passage].rsplit("-", 1)[0]


def load_gate_set(path: Path = GATE_SET) -> GateSet:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    passages = [r for r in rows if r["kind"] == "passage"]
    index = {r["id"]: i for i, r in enumerate(passages)}
    queries = [r for r in rows if r["kind"] == "query"]
    relevant = [frozenset(index[p] for p in q["relevant"]) for q in queries]
    return GateSet([r["id"] for r in passages], [r["text"] for r in passages], [q["text"] for q in queries], relevant)


@dataclass(frozen=True)
class GateResult:
    """One precision's figures against float32 on the gate set."""

    precision: str
    mean_cosine: float
    min_cosine: float
    ndcg: float
    reference_ndcg: float

    @property
    def ndcg_drop(self) -> float:
        return self.reference_ndcg - self.ndcg

    @property
    def passed(self) -> bool:
        cosines = self.mean_cosine >= MIN_COSINE and self.min_cosine >= MIN_WORST_COSINE
        return cosines and self.ndcg_drop <= MAX_NDCG_DROP

    def as_dict(self) -> GateFigures:
        return {
            "precision": self.precision,
            "passed": self.passed,
            "mean_cosine": round(self.mean_cosine, 6),
            "min_cosine": round(self.min_cosine, 6),
            "ndcg_at_10": round(self.ndcg, 6),
            "reference_ndcg_at_10": round(self.reference_ndcg, 6),
            "ndcg_drop": round(self.ndcg_drop, 6),
            "thresholds": {
                "min_mean_cosine": MIN_COSINE,
                "min_worst_cosine": MIN_WORST_COSINE,
                "max_ndcg_drop": MAX_NDCG_DROP,
            },
        }


def ndcg_at_10(scores: Tensor, relevant: list[frozenset[int]], candidates: list[list[int]] | None = None) -> float:
    """Mean nDCG@10 with binary relevance. scores: [Q, P] (over `candidates[q]` when given)."""
    total = 0.0
    for q, rel in enumerate(relevant):
        pool = candidates[q] if candidates is not None else list(range(scores.shape[1]))
        order = sorted(range(len(pool)), key=lambda i: -float(scores[q, i]))[:10]
        dcg = sum(1.0 / math.log2(rank + 2) for rank, i in enumerate(order) if pool[i] in rel)
        ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(10, len(rel))))
        total += dcg / ideal
    return total / len(relevant)


@dataclass(frozen=True)
class GateRun:
    """One model's pass over the gate set: its outputs, its nDCG@10, and what the pass cost on this machine."""

    values: list[Tensor] | Tensor  # per-text outputs (embedders) or the flat pair scores (cross-encoders)
    ndcg: float
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def gate_run(model: PackedModel, data: GateSet | None = None, stop: threading.Event | None = None) -> GateRun:
    """Run the gate set through `model` once, timed (tokenising included, as a request would be); TuneStopped
    before the next batch once `stop` is set."""
    data = data or load_gate_set()
    card = model.card
    started = time.perf_counter()
    values: list[Tensor] | Tensor
    if "encode" in card.tasks and {"dense", "sparse", "multivector"} & set(card.outputs):
        values, ndcg, tokens = _retrieval(model, data, stop)
    elif card.score is not None and card.score.kind == "classifier":
        values, ndcg, tokens = _rerank(model, data, stop)
    else:
        raise InvalidInput(f"model {card.id!r}: the quality gate covers embedders and cross-encoders only")
    return GateRun(values, ndcg, tokens, time.perf_counter() - started)


def compare(reference: GateRun, candidate: GateRun, precision: str) -> GateResult:
    """The candidate's gate figures against the float32 reference's run."""
    if isinstance(reference.values, Tensor) and isinstance(candidate.values, Tensor):
        a, b = reference.values - reference.values.mean(), candidate.values - candidate.values.mean()
        cos = F.cosine_similarity(a, b, dim=0).reshape(1)
    else:
        assert isinstance(reference.values, list) and isinstance(candidate.values, list)
        cos = _cosines(reference.values, candidate.values)
    return GateResult(precision, float(cos.mean()), float(cos.min()), candidate.ndcg, reference.ndcg)


def run_gate(reference: PackedModel, candidate: PackedModel, data: GateSet | None = None) -> GateResult:
    """The candidate's gate figures against the float32 reference of the same model."""
    data = data or load_gate_set()
    return compare(gate_run(reference, data), gate_run(candidate, data), candidate.precision.name)


def _cosines(ref: list[Tensor], got: list[Tensor]) -> Tensor:
    """Per text: cosine of the two outputs ([dim]), or the mean over tokens of token vectors ([n, dim])."""
    return torch.stack([F.cosine_similarity(a, b, dim=-1).mean() for a, b in zip(ref, got, strict=True)])


def _run(model: PackedModel, seqs: list[Encoded], spec: OutputSpec, stop: threading.Event | None) -> Readout:
    """The outputs `spec` names of every sequence, read as a worker reads them (PackedModel.read_all, packed
    under the card's token budget); TuneStopped before the next batch once `stop` is set."""
    try:
        read, _ = model.read_all(seqs, spec, model.precision.profile.max_batch_tokens, MAX_ITEMS, stop)
    except ReadCancelled:
        raise TuneStopped from None
    return read


def _outputs(
    model: PackedModel, texts: list[str], is_query: bool, stop: threading.Event | None
) -> tuple[list[Tensor], int]:
    """The card's main encode output per text, as an encode request with the card's defaults gets it: the
    card's prefix (ModelCard.prefix), its normalisation (sentence_vectors, as the encode handler shapes a dense
    vector), SPLADE weights over the vocabulary, or token vectors."""
    card = model.card
    prefix = card.prefix(is_query)
    seqs = model.encode_texts([prefix + t for t in texts], truncate=True, is_query=is_query)
    tokens = sum(len(s.ids) for s in seqs)
    if "dense" in card.outputs:
        rows = _run(model, seqs, OutputSpec.of("dense"), stop).dense
        return list(sentence_vectors(torch.stack(rows), None, card.normalize)), tokens
    if "sparse" in card.outputs:
        weights = _run(model, seqs, OutputSpec.of("sparse"), stop).sparse
        return [_densify(ids, vals, model.vocab_size) for ids, vals in weights], tokens
    return _run(model, seqs, OutputSpec.of("multivector"), stop).multivector, tokens


def _densify(ids: npt.NDArray[np.int32], values: npt.NDArray[np.float32], size: int) -> Tensor:
    row = torch.zeros(size)
    row[torch.as_tensor(ids, dtype=torch.long)] = torch.as_tensor(values)
    return row


def _retrieval(model: PackedModel, data: GateSet, stop: threading.Event | None) -> tuple[list[Tensor], float, int]:
    """Every text's output (passages, then queries), the queries' nDCG@10 over all passages, and the tokens run."""
    passages, p_tokens = _outputs(model, data.passages, False, stop)
    queries, q_tokens = _outputs(model, data.queries, True, stop)
    if passages[0].dim() == 2:  # token vectors: MaxSim
        scores = torch.tensor([maxsim_scores(q, passages) for q in queries])
    else:
        scores = torch.stack(queries) @ torch.stack(passages).T
    return passages + queries, ndcg_at_10(scores, data.relevant), p_tokens + q_tokens


def _rerank(model: PackedModel, data: GateSet, stop: threading.Event | None) -> tuple[Tensor, float, int]:
    """A cross-encoder's scores for each query against the passages of its topic and the next topic, their
    nDCG@10, and the tokens run."""
    topics = list(dict.fromkeys(data.topic(i) for i in range(len(data.passages))))
    by_topic = {t: [i for i in range(len(data.passages)) if data.topic(i) == t] for t in topics}
    candidates = []
    for rel in data.relevant:
        t = topics.index(data.topic(min(rel)))
        candidates.append(by_topic[topics[t]] + by_topic[topics[(t + 1) % len(topics)]])
    pairs = [(q, data.passages[p]) for q, pool in zip(data.queries, candidates, strict=True) for p in pool]
    seqs = model.encode_pairs(pairs, truncate=True)
    flat = torch.tensor(_run(model, seqs, OutputSpec.of("score"), stop).score)
    width = len(candidates[0])
    tokens = sum(len(s.ids) for s in seqs)
    return flat, ndcg_at_10(flat.view(len(candidates), width), data.relevant, candidates), tokens
