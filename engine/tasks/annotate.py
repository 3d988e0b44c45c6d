"""Request + card -> Task: check the limits, resolve every default against the card, once, at the edge.

Nothing here tokenises or touches a model: the gateway stays cheap. What the worker needs to know (the
truncation policy, normalisation, which prefix a text takes, which LoRA adapter) is decided here.
"""

from __future__ import annotations

import time

from engine.catalogue.cards import ModelCard
from engine.catalogue.weights import resolve_adapter
from engine.config import EngineSettings
from engine.errors import InvalidInput, PayloadTooLarge
from engine.tasks.requests import EncodeRequest, Item, ScoreRequest
from engine.tasks.task import EncodeParams, ScoreParams, Task, TaskItem


def estimate_tokens(text: str) -> int:
    """A cheap upper-ish guess of token count without tokenising (about 4 characters a token)."""
    return len(text) // 4 + 2


def check_limits(settings: EngineSettings, n_items: int, texts: list[tuple[str, str]]) -> None:
    """413 for too many items or an over-long text (where, text), before anything is queued."""
    if n_items > settings.max_items:
        raise PayloadTooLarge(f"{n_items} items is over the limit of {settings.max_items} per request")
    for where, text in texts:
        if len(text) > settings.max_item_chars:
            raise PayloadTooLarge(f"{where}: {len(text)} characters is over {settings.max_item_chars}")


def adapter_for(card: ModelCard, settings: EngineSettings, lora: str | None, profile: str | None) -> str | None:
    """A request's LoRA adapter, else its profile's; it must exist (400 otherwise)."""
    lora = lora or card.profile(profile).lora
    if lora is not None:
        resolve_adapter(card, lora, settings.lora_dir)
    return lora


def _items(items: list[Item]) -> list[TaskItem]:
    return [TaskItem(id=it.id, text=it.text) for it in items]


def encode_task(card: ModelCard, req: EncodeRequest, settings: EngineSettings, tenant: str | None = None) -> Task:
    """An encode task with every option resolved; 400 for what this model cannot do, 413 over the limits.
    The caller has checked that the card serves encode."""
    check_limits(settings, len(req.items), [(f"items.{i}", it.text) for i, it in enumerate(req.items)])
    p, opts = req.params, req.params.options
    missing = [t for t in p.output_types if t not in card.outputs]
    if missing:
        raise InvalidInput(f"model {card.id!r} cannot produce {missing}; it produces {card.outputs}")
    if opts.dimensions is not None and card.dense_dim and opts.dimensions > card.dense_dim:
        raise InvalidInput(f"dimensions {opts.dimensions} is over the model's {card.dense_dim}")
    is_query = bool(opts.is_query)
    card_prefix = card.query_instruction if is_query else card.document_instruction
    params = EncodeParams(
        output_types=tuple(p.output_types),
        output_dtype=p.output_dtype,  # validated against OUTPUT_DTYPES
        prefix=(p.instruction if p.instruction is not None else card_prefix) or "",
        is_query=is_query,
        normalize=card.normalize if opts.normalize is None else opts.normalize,
        dimensions=opts.dimensions,
        truncate=card.truncate if opts.truncate is None else opts.truncate,
        adapter=adapter_for(card, settings, opts.lora, opts.profile),
    )
    return Task(
        model=card.id,
        items=_items(req.items),
        params=params,
        est_tokens=sum(estimate_tokens(it.text) for it in req.items),
        deadline=time.time() + settings.request_timeout_s,
        tenant=tenant,
    )


def score_task(card: ModelCard, req: ScoreRequest, settings: EngineSettings, tenant: str | None = None) -> Task:
    """A score task (the candidates are its items) with the query as this card's scorer reads it. The caller
    has checked that the card serves score."""
    texts = [("query", req.query.text)] + [(f"items.{i}", it.text) for i, it in enumerate(req.items)]
    check_limits(settings, len(req.items), texts)
    spec = card.score
    assert spec is not None  # a card that declares 'score' has a score section (card validation)
    query, instruction, doc_prefix = req.query.text, req.instruction, ""
    if spec.kind == "maxsim":  # query and documents are encoded apart, each with its prefix
        query = (instruction if instruction is not None else card.query_instruction or "") + query
        doc_prefix = card.document_instruction or ""
    elif spec.kind == "classifier" and instruction:
        query = instruction + query
    params = ScoreParams(
        query=query,
        query_id=req.query.id,
        document_prefix=doc_prefix,
        instruction=(instruction or spec.instruction) if spec.kind == "yes_no" else "",
        truncate=card.truncate if req.options.truncate is None else req.options.truncate,
        adapter=adapter_for(card, settings, req.options.lora, req.options.profile),
    )
    q_tokens = estimate_tokens(req.query.text)
    return Task(
        model=card.id,
        items=_items(req.items),
        params=params,
        est_tokens=sum(q_tokens + estimate_tokens(it.text) for it in req.items),
        deadline=time.time() + settings.request_timeout_s,
        tenant=tenant,
    )
