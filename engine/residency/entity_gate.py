"""The quality gate of a GLiNER model's reduced precision: its entities against float32's on a shipped text set.

The candidate and the same model in float32 read the shipped entity set (data/gliner_gate.jsonl: 32 short
sentences on people, places, companies, products, medicine and history, each with its own four labels) at
the card's threshold. Each finds a set of (text, first word, last word, label) spans; the candidate passes
when the F1 of its spans against float32's is at least MIN_ENTITY_F1. Reduced precision moves scores by
about 1e-2, so a span whose float32 score sits right at the threshold may appear or drop; 0.95 lets about
one span in twenty do so (on a real model a handful over the set), while weights that are wrong, not just
rounded, lose most spans and land far below it. Float32 must itself find at least MIN_REFERENCE_SPANS
spans, or the gate has nothing to measure and refuses every candidate.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.model.gliner_runtime import GlinerModel, Window
from engine.residency.reports import GateFigures
from engine.residency.stop import check

ENTITY_SET = Path(__file__).parent / "data" / "gliner_gate.jsonl"
MIN_ENTITY_F1 = 0.95
MIN_REFERENCE_SPANS = 5
BATCH = 8  # windows per call to the model
SpanKey = tuple[int, int, int, str]  # text index, first word, last word, label


@dataclass(frozen=True)
class EntitySet:
    """Texts and, for each, the labels GLiNER is asked for."""

    texts: list[str]
    labels: list[tuple[str, ...]]


def load_entity_set(path: Path = ENTITY_SET) -> EntitySet:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return EntitySet([r["text"] for r in rows], [tuple(r["labels"]) for r in rows])


@dataclass(frozen=True)
class EntityRun:
    """One model's pass over the entity set: the spans it found, and what the pass cost on this machine."""

    spans: frozenset[SpanKey]
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def entity_run(
    model: GlinerModel, data: EntitySet, limit: int | None = None, stop: threading.Event | None = None
) -> EntityRun:
    """Run the set (its first `limit` texts) through `model` once, timed (word split and token counts
    included, as a request's would be), at the card's threshold, one window per text; TuneStopped before the
    next batch once `stop` is set."""
    threshold = model.card.extract.threshold if model.card.extract is not None else 0.5
    started = time.perf_counter()
    windows, tokens = [], 0
    for text, labels in list(zip(data.texts, data.labels, strict=True))[:limit]:
        words = [w for w, _, _ in model.words(text)][: model.window_words]
        tokens += model.prompt_tokens(labels) + sum(model.token_counts(words))
        windows.append(Window(words, labels, threshold, flat_ner=True, multi_label=False))
    spans: set[SpanKey] = set()
    for at in range(0, len(windows), BATCH):
        check(stop)
        for i, found in enumerate(model.predict(windows[at : at + BATCH]), start=at):
            spans.update((i, s.start, s.end, s.label) for s in found)
    return EntityRun(frozenset(spans), tokens, time.perf_counter() - started)


@dataclass(frozen=True)
class EntityGateResult:
    """One precision's spans against float32's on the entity set."""

    precision: str
    f1: float
    reference_spans: int
    candidate_spans: int

    @property
    def passed(self) -> bool:
        return self.reference_spans >= MIN_REFERENCE_SPANS and self.f1 >= MIN_ENTITY_F1

    def as_dict(self) -> GateFigures:
        return {
            "precision": self.precision,
            "passed": self.passed,
            "entity_f1": round(self.f1, 6),
            "reference_entities": self.reference_spans,
            "candidate_entities": self.candidate_spans,
            "entity_thresholds": {"min_entity_f1": MIN_ENTITY_F1, "min_reference_entities": MIN_REFERENCE_SPANS},
        }


def compare_entities(reference: EntityRun, candidate: EntityRun, precision: str) -> EntityGateResult:
    """F1 of the candidate's spans, float32's taken as the truth (1.0 when both found none)."""
    ref, got = reference.spans, candidate.spans
    both = len(ref & got)
    f1 = 2 * both / (len(ref) + len(got)) if ref or got else 1.0
    return EntityGateResult(precision, f1, len(ref), len(got))
