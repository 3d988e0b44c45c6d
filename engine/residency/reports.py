"""What a precision tune reports, stored beside the profile it chose and shown by /v1/models and `shoal models`."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class GateThresholds(TypedDict):
    """The bars a reduced precision must clear against float32."""

    min_mean_cosine: float
    min_worst_cosine: float
    max_ndcg_drop: float


class EntityThresholds(TypedDict):
    """The bars a GLiNER model's reduced precision must clear against float32 (engine/residency/entity_gate.py)."""

    min_entity_f1: float
    min_reference_entities: int


class GateFigures(TypedDict):
    """One precision's quality gate: its figures against float32, or the error that kept it from running."""

    precision: str
    passed: bool
    mean_cosine: NotRequired[float]
    min_cosine: NotRequired[float]
    ndcg_at_10: NotRequired[float]
    reference_ndcg_at_10: NotRequired[float]
    ndcg_drop: NotRequired[float]
    thresholds: NotRequired[GateThresholds]
    entity_f1: NotRequired[float]  # GLiNER: F1 of the candidate's entity spans against float32's
    reference_entities: NotRequired[int]
    candidate_entities: NotRequired[int]
    entity_thresholds: NotRequired[EntityThresholds]
    error: NotRequired[str]


class Speed(TypedDict):
    """Throughput and per-batch latency of one setting over a workload."""

    tokens_per_s: float
    p50_ms: float
    p99_ms: float


class GridRow(TypedDict):
    """One measured (precision, token budget): `shoal tune` times a workload; a first load's tune, the gate run."""

    dtype: str
    tokens_per_s: float
    max_batch_tokens: NotRequired[int]
    p50_ms: NotRequired[float]
    p99_ms: NotRequired[float]
    measured_by: NotRequired[str]


class TuneReport(TypedDict, total=False):
    """A tune's report: what it measured, the gate figures per precision, and why it chose what it did."""

    auto: bool
    reason: str
    seconds: float
    gate_tokens: int
    latency_ms: float
    requests: int
    grid: list[GridRow]
    gates: dict[str, GateFigures]
    skipped: list[str]


class TuneResult(TuneReport):
    """What `shoal tune` prints: the model, the device kind, the profile it stored, and the report."""

    model: str
    device: str
    profile: dict[str, str | int | bool]


class PrecisionRow(TypedDict):
    """One precision a stored tune tried, as the model listings show it."""

    precision: str
    passed: bool | None  # None: tuned without a gate
    mean_cosine: NotRequired[float]
    ndcg_drop: NotRequired[float]
    entity_f1: NotRequired[float]
    error: NotRequired[str]
    tokens_per_s: NotRequired[float]


class PrecisionSummary(TypedDict):
    """What the model listings show of a stored tune."""

    selected: str
    reason: str
    max_batch_tokens: int
    precisions: list[PrecisionRow]


class PrecisionState(TypedDict):
    """The precision a model serves in now (None: not loaded), why, and whether a tune is running."""

    precision: str | None
    reason: str
    tuning: bool
