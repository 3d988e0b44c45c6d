"""Extract requests: the wire schema, validated once at the edge, and the Task it becomes against a card.

POST /v1/extract/{model}: `{items, params: {labels, instruction?, options: {threshold, flat_ner, multi_label,
hypothesis_template, descriptions, temperature, truncate, profile, precision}}}`. Every default is resolved here
against the card (its extract mode, threshold and hypothesis template); limits answer 413, malformed
labels and options 400, before anything is queued.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from engine.catalogue.cards import ModelCard
from engine.catalogue.catalogue import ExtractMode, check_extract
from engine.config import EngineSettings
from engine.errors import InvalidInput, PayloadTooLarge
from engine.tasks.annotate import estimate_tokens, requested_precision
from engine.tasks.limits import (
    check_count,
    check_item_id,
    check_labels,
    check_tokens,
    clean_instruction,
    clean_text,
)
from engine.tasks.requests import Item, ItemInput, Options, item_bodies, parse_items_body
from engine.tasks.results import JSONObject
from engine.tasks.task import ExtractParams, Task, TaskItem

# embedding cards (no extract section): what a label's vector is made from, and the cosine similarity a label
# needs in multi-label mode (0.15: recall 0.81 / precision 0.82 with MiniLM on tests/data/zero_shot_topics.jsonl)
EMBEDDING_TEMPLATE = "This text is about {label}."
EMBEDDING_THRESHOLD = 0.15
EMBEDDING_TEMPERATURE = 0.05  # single-label: softmax over cosine / temperature


class ExtractOptions(BaseModel):
    """Runtime switches of one extract request."""

    model_config = ConfigDict(extra="forbid")

    threshold: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    flat_ner: bool | None = None
    multi_label: bool | None = None
    hypothesis_template: str | None = None
    descriptions: dict[str, str] | None = None
    temperature: float | None = Field(default=None, gt=0.0, le=10.0, allow_inf_nan=False)
    truncate: bool | None = None
    profile: str | None = None
    precision: str | None = None


class ExtractRequestParams(BaseModel):
    """`params` of an extract request, as sent."""

    model_config = ConfigDict(extra="forbid")

    labels: list[str] | None = None
    instruction: str | None = None
    output_schema: object = None  # SIE's structured extraction: refused with a clear message
    options: ExtractOptions = Field(default_factory=ExtractOptions)


class ExtractRequest(BaseModel):
    """POST /v1/extract/{model}: entities or classifications of `items`."""

    model_config = ConfigDict(extra="forbid")

    items: list[Item]
    params: ExtractRequestParams = Field(default_factory=ExtractRequestParams)


def parse_extract(body: object, max_items: int | None = None) -> ExtractRequest:
    """Validate an extract body (decoded from msgpack or JSON) or raise INVALID_INPUT."""
    shape = "'items' and 'params.labels'"
    return parse_items_body(ExtractRequest, body, max_items, shape, "items must not be empty")


class ExtractBodyParams(TypedDict, total=False):
    """`params` of an extract body as a client builds it (only what the caller set)."""

    labels: list[str]
    instruction: str
    options: JSONObject


class ExtractBody(TypedDict):
    """An extract body as a client builds it (build_extract_body)."""

    items: list[JSONObject]
    params: NotRequired[ExtractBodyParams]


def build_extract_body(
    items: Sequence[ItemInput],
    *,
    labels: list[str] | None = None,
    instruction: str | None = None,
    options: Options | None = None,
) -> ExtractBody:
    """The wire body for an extract call; shared by every client."""
    params: ExtractBodyParams = {}
    if labels is not None:
        params["labels"] = list(labels)
    if instruction is not None:
        params["instruction"] = instruction
    if options:
        params["options"] = dict(options)
    body: ExtractBody = {"items": item_bodies(items)}
    if params:
        body["params"] = params
    return body


def check_extract_labels(labels: list[str] | None, settings: EngineSettings) -> tuple[str, ...]:
    """At least one label, none empty or repeated (400); not too many or too long (413)."""
    if not labels:
        raise InvalidInput("params.labels must name at least one label (entity type or class)")
    checked = check_labels(labels, settings)
    seen: dict[str, int] = {}
    for i, label in enumerate(checked):
        if label in seen:
            raise InvalidInput(f"params.labels.{i} {label!r} repeats params.labels.{seen[label]}")
        seen[label] = i
    return tuple(checked)


def extract_items(items: list[Item], mode: ExtractMode, settings: EngineSettings) -> list[TaskItem]:
    """Task items: ids checked, texts checked for length (413) and valid Unicode, none empty (400). Entity
    texts may be long (GLiNER windows them: SHOAL_MAX_EXTRACT_CHARS); classified texts are read up to the
    model's length, so they have encode's limit (SHOAL_MAX_ITEM_CHARS)."""
    check_count("items", len(items), settings.max_items, "SHOAL_MAX_ITEMS")
    limit, setting = (
        (settings.max_extract_chars, "SHOAL_MAX_EXTRACT_CHARS")
        if mode == "entities"
        else (settings.max_item_chars, "SHOAL_MAX_ITEM_CHARS")
    )
    out = []
    for i, item in enumerate(items):
        if item.id is not None:
            check_item_id(f"items.{i}.id", item.id, settings)
        text = clean_text(f"items.{i}.text", item.text, settings, limit, setting)
        if not text.strip():
            raise InvalidInput(f"items.{i}: the text is empty; there is nothing to extract from")
        out.append(TaskItem(id=item.id, text=text))
    return out


def _refuse(mode: ExtractMode, what: str, allowed: tuple[ExtractMode, ...]) -> None:
    kinds = {"entities": "GLiNER entity", "nli": "NLI classification", "embedding": "embedding classification"}
    if mode not in allowed:
        raise InvalidInput(
            f"{what} does not apply to {kinds[mode]} models; it applies to {[kinds[m] for m in allowed]}"
        )


def _hypotheses(
    card: ModelCard, labels: tuple[str, ...], req: ExtractRequest, settings: EngineSettings
) -> tuple[str, ...]:
    """One text per label: the hypothesis template with the label's description (or the label) in it."""
    opts, limit = req.params.options, settings.max_label_chars
    descriptions = opts.descriptions or {}
    unknown = sorted(set(descriptions) - set(labels))
    if unknown:
        raise InvalidInput(f"options.descriptions names labels not in params.labels: {unknown[:5]}")
    for label, text in descriptions.items():
        if not text.strip() or len(text) > limit:
            raise InvalidInput(f"options.descriptions[{label!r}] must be 1 to {limit} characters")
        descriptions[label] = clean_text(f"options.descriptions[{label!r}]", text, settings, limit)
    default = card.extract.template if card.extract is not None else EMBEDDING_TEMPLATE
    template = opts.hypothesis_template if opts.hypothesis_template is not None else default
    if "{label}" not in template or len(template) > limit:
        raise InvalidInput(f"options.hypothesis_template must contain '{{label}}' and be at most {limit} characters")
    template = clean_text("options.hypothesis_template", template, settings, limit)
    return tuple(template.replace("{label}", descriptions.get(label, label)) for label in labels)


def extract_task(card: ModelCard, req: ExtractRequest, settings: EngineSettings, tenant: str | None = None) -> Task:
    """An extract task with its mode, labels and switches resolved against the card; 400 for what this model
    cannot do, 413 over the limits."""
    mode = check_extract(card)
    p, opts = req.params, req.params.options
    if p.output_schema is not None:
        raise InvalidInput("params.output_schema (structured extraction) is not supported; send params.labels")
    labels = check_extract_labels(p.labels, settings)
    items = extract_items(req.items, mode, settings)
    instruction = clean_instruction("params.instruction", p.instruction, settings)
    card.profile(opts.profile)  # an unknown profile is a 400
    if instruction is not None:
        _refuse(mode, "params.instruction", ("embedding",))
    if opts.flat_ner is not None:
        _refuse(mode, "options.flat_ner", ("entities",))
    for name in ("hypothesis_template", "descriptions", "truncate"):
        if getattr(opts, name) is not None:
            _refuse(mode, f"options.{name}", ("nli", "embedding"))
    if opts.temperature is not None:
        _refuse(mode, "options.temperature", ("embedding",))
    n_items, n_labels = len(req.items), len(labels)
    if mode == "nli" and n_items * n_labels > settings.max_extract_pairs:
        raise PayloadTooLarge(
            f"{n_items} items x {n_labels} labels is {n_items * n_labels} (item, label) pairs, over the limit of "
            f"{settings.max_extract_pairs} per request"
        )
    default_threshold = card.extract.threshold if card.extract is not None else EMBEDDING_THRESHOLD
    params = ExtractParams(
        mode=mode,
        labels=labels,
        threshold=default_threshold if opts.threshold is None else opts.threshold,
        flat_ner=True if opts.flat_ner is None else opts.flat_ner,
        multi_label=bool(opts.multi_label),
        hypotheses=() if mode == "entities" else _hypotheses(card, labels, req, settings),
        prefix=(instruction if instruction is not None else card.document_instruction) or "",
        label_prefix=(card.query_instruction or "") if mode == "embedding" else "",
        temperature=opts.temperature or EMBEDDING_TEMPERATURE,
        truncate=card.truncate if opts.truncate is None else opts.truncate,
    )
    text_tokens = [estimate_tokens(it.text) for it in items]
    label_tokens = sum(estimate_tokens(h) for h in (params.hypotheses or labels))
    if mode == "nli":
        est = sum(t * n_labels for t in text_tokens) + n_items * label_tokens
    else:
        est = sum(text_tokens) + label_tokens
    if mode != "entities":  # entity texts are bounded by SHOAL_MAX_EXTRACT_CHARS and windowed instead
        check_tokens(est, settings)
    return Task(
        model=card.id,
        items=items,
        params=params,
        est_tokens=est,
        deadline=time.time() + settings.request_timeout_s,
        tenant=tenant,
        precision=requested_precision(opts.precision),
    )
