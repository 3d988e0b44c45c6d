"""Typed tasks for handler-level tests, made the way the gateway makes them (engine.tasks.annotate)."""

from __future__ import annotations

from typing import Any

from engine.catalogue.cards import ModelCard
from engine.config import EngineSettings
from engine.errors import ShoalError
from engine.model.loaded import LoadedModel
from engine.queue.protocol import Reply
from engine.tasks import annotate
from engine.tasks.requests import parse_encode, parse_score
from engine.tasks.task import Task
from engine.worker.batching import BatchLimits
from engine.worker.dispatch import run_tasks

SETTINGS = EngineSettings()


def encode_task(card: ModelCard, texts: list[str], **params: Any) -> Task:
    """An encode task over `texts` with wire `params` (output_types, instruction, options, ...)."""
    return annotate.encode_task(card, parse_encode({"items": [{"text": t} for t in texts], "params": params}), SETTINGS)


def score_task(card: ModelCard, query: str, docs: list[str], **body: Any) -> Task:
    """A score task: query id 'q', candidates 'd0', 'd1', ...; extra wire fields (instruction, options)."""
    items = [{"id": f"d{i}", "text": d} for i, d in enumerate(docs)]
    return annotate.score_task(
        card, parse_score({"query": {"id": "q", "text": query}, "items": items, **body}), SETTINGS
    )


def run(model: LoadedModel, task: Task, max_tokens: int = 8192, max_items: int = 256) -> Reply:
    """One task through the worker's handler table; its error is raised."""
    [out] = run_tasks(model, [task], BatchLimits(max_tokens, max_items), lambda kind, items, tokens: None)
    if isinstance(out, ShoalError):
        raise out
    return out
