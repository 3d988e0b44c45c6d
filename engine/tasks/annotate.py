"""Request + card -> Task: check the limits, resolve every default against the card, once, at the edge.

Nothing here tokenises or touches a model: the gateway stays cheap. What the worker needs to know (the
truncation policy, normalisation, which prefix a text takes, which LoRA adapter) is decided here.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import cast

from engine.catalogue.cards import PRECISIONS, ModelCard, Precision
from engine.catalogue.weights import AdapterPolicy, resolve_adapter
from engine.config import EngineSettings
from engine.errors import InvalidInput
from engine.tasks.limits import check_count, check_item_id, check_tokens, clean_instruction, clean_text
from engine.tasks.requests import EncodeRequest, Item, ScoreRequest
from engine.tasks.task import EncodeParams, ScoreParams, Task, TaskItem


def estimate_tokens(text: str) -> int:
    """A cheap upper-ish guess of token count without tokenising (about 4 characters a token)."""
    return len(text) // 4 + 2


def check_limits(settings: EngineSettings, n_items: int, texts: list[tuple[str, str]]) -> None:
    """413 for too many items or an over-long text (where, text), 400 for a text no tokenizer takes; before
    anything is queued (the routes that count or read texts themselves call this)."""
    check_count("items", n_items, settings.max_items, "SHOAL_MAX_ITEMS")
    for where, text in texts:
        clean_text(where, text, settings)


def task_items(items: list[Item], settings: EngineSettings, where: str = "items") -> list[TaskItem]:
    """The items as the task carries them: count (413), each text's length and encodability, each id."""
    check_count(where, len(items), settings.max_items, "SHOAL_MAX_ITEMS")
    out = []
    for i, it in enumerate(items):
        if it.id is not None:
            check_item_id(f"{where}.{i}.id", it.id, settings)
        out.append(TaskItem(id=it.id, text=clean_text(f"{where}.{i}.text", it.text, settings)))
    return out


def requested_precision(asked: str | None) -> Precision | None:
    """The precision a request asks to be served in (None: the engine's choice); 400 for a name that is none.
    Whether this device offers it is the engine's check (AsyncEngine.annotate)."""
    if asked is None:
        return None
    if asked not in PRECISIONS:
        raise InvalidInput(f"options.precision: unknown precision {asked!r}; the precisions are {list(PRECISIONS)}")
    return cast(Precision, asked)


def adapter_for(card: ModelCard, settings: EngineSettings, lora: str | None, profile: str | None) -> str | None:
    """A request's LoRA adapter, else its profile's, by its canonical name; it must exist (400 otherwise)."""
    lora = lora or card.profile(profile).lora
    if lora is None:
        return None
    key, _ = resolve_adapter(
        card, lora, _policy(settings.lora_dir, settings.local_models, tuple(settings.lora_folders))
    )
    return key


@functools.lru_cache(maxsize=8)  # one per settings a process runs with: not rebuilt (folders resolved) per request
def _policy(lora_dir: Path | None, local: bool, folders: tuple[Path, ...]) -> AdapterPolicy:
    return AdapterPolicy.of(lora_dir, local, folders)


def encode_task(card: ModelCard, req: EncodeRequest, settings: EngineSettings, tenant: str | None = None) -> Task:
    """An encode task with every option resolved; 400 for what this model cannot do, 413 over the limits.
    The caller has checked that the card serves encode."""
    items = task_items(req.items, settings)
    p, opts = req.params, req.params.options
    instruction = clean_instruction("params.instruction", p.instruction, settings)
    missing = [t for t in p.output_types if t not in card.outputs]
    if missing:
        raise InvalidInput(f"model {card.id!r} cannot produce {missing}; it produces {card.outputs}")
    if opts.dimensions is not None and card.dense_dim and opts.dimensions > card.dense_dim:
        raise InvalidInput(f"dimensions {opts.dimensions} is over the model's {card.dense_dim}")
    is_query = bool(opts.is_query)
    prefix = card.prefix(is_query, instruction)
    est_tokens = sum(estimate_tokens(it.text) for it in items) + len(items) * len(prefix) // 4
    check_tokens(est_tokens, settings)
    params = EncodeParams(
        output_types=tuple(p.output_types),
        output_dtype=p.output_dtype,  # validated against OUTPUT_DTYPES
        prefix=prefix,
        is_query=is_query,
        normalize=card.normalize if opts.normalize is None else opts.normalize,
        dimensions=opts.dimensions,
        truncate=card.truncate if opts.truncate is None else opts.truncate,
        adapter=adapter_for(card, settings, opts.lora, opts.profile),
    )
    return Task(
        model=card.id,
        items=items,
        params=params,
        est_tokens=est_tokens,
        deadline=time.time() + settings.request_timeout_s,
        tenant=tenant,
        precision=requested_precision(opts.precision),
    )


def score_task(card: ModelCard, req: ScoreRequest, settings: EngineSettings, tenant: str | None = None) -> Task:
    """A score task (the candidates are its items) with the query as this card's scorer reads it. The caller
    has checked that the card serves score."""
    items = task_items(req.items, settings)
    query, query_id = clean_text("query.text", req.query.text, settings), req.query.id
    if query_id is not None:
        check_item_id("query.id", query_id, settings)
    instruction = clean_instruction("instruction", req.instruction, settings)
    spec = card.score
    assert spec is not None  # a card that declares 'score' has a score section (card validation)
    doc_prefix = ""
    if spec.kind == "maxsim":  # query and documents are encoded apart, each with its prefix
        query = (instruction if instruction is not None else card.query_instruction or "") + query
        doc_prefix = card.document_instruction or ""
    elif spec.kind == "classifier" and instruction:
        query = instruction + query
    params = ScoreParams(
        query=query,
        query_id=query_id,
        document_prefix=doc_prefix,
        instruction=(instruction or spec.instruction) if spec.kind == "yes_no" else "",
        truncate=card.truncate if req.options.truncate is None else req.options.truncate,
        adapter=adapter_for(card, settings, req.options.lora, req.options.profile),
    )
    q_tokens = estimate_tokens(params.query + params.instruction + doc_prefix)
    est_tokens = sum(q_tokens + estimate_tokens(it.text) for it in items)
    check_tokens(est_tokens, settings)
    return Task(
        model=card.id,
        items=items,
        params=params,
        est_tokens=est_tokens,
        deadline=time.time() + settings.request_timeout_s,
        tenant=tenant,
        precision=requested_precision(req.options.precision),
    )
