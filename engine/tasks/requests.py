"""Request bodies of the native API as the wire carries them: validated once at the edge, built once for clients."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, NotRequired, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from engine.errors import InvalidInput
from engine.tasks.limits import count_before_parsing
from engine.tasks.results import JSONObject, JSONValue
from engine.tasks.task import OUTPUT_DTYPES

BodyT = TypeVar("BodyT", bound=BaseModel)

UNSUPPORTED_MEDIA = ("images", "image", "audio", "video")
ItemInput = str | Mapping[str, JSONValue]  # what a client passes: a text, or {"id", "text", "metadata"}
Options = Mapping[str, JSONValue]  # a client's options map, sent as it is and validated by the server


class EncodeBodyParams(TypedDict, total=False):
    """`params` of an encode body as a client builds it (only what the caller set)."""

    output_types: list[str]
    instruction: str
    output_dtype: str
    options: JSONObject


class EncodeBody(TypedDict):
    """An encode body as a client builds it (build_encode_body)."""

    items: list[JSONObject]
    params: NotRequired[EncodeBodyParams]


class ScoreBody(TypedDict):
    """A score body as a client builds it (build_score_body)."""

    query: JSONObject
    items: list[JSONObject]
    instruction: NotRequired[str]
    options: NotRequired[JSONObject]


class Item(BaseModel):
    """One input: text with an optional caller id and metadata."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    text: str
    metadata: dict[str, object] | None = None  # the caller's, passed through unread (msgpack may carry bytes)


class EncodeOptions(BaseModel):
    """Runtime switches of one encode request."""

    model_config = ConfigDict(extra="forbid")

    is_query: bool | None = None
    normalize: bool | None = None
    dimensions: StrictInt | None = Field(default=None, ge=1)  # strict: `true` is not 1
    truncate: bool | None = None
    profile: str | None = None
    lora: str | None = None
    precision: str | None = None  # serve this request in this precision (e.g. float32); checked when the task is made


class EncodeRequestParams(BaseModel):
    """`params` of an encode request, as sent: unset fields take the card's defaults when the task is made."""

    model_config = ConfigDict(extra="forbid")

    output_types: list[Literal["dense", "sparse", "multivector"]] = ["dense"]  # pydantic copies defaults
    instruction: str | None = None
    output_dtype: str = "float32"
    options: EncodeOptions = Field(default_factory=EncodeOptions)

    @field_validator("output_dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        if v not in OUTPUT_DTYPES:
            raise ValueError(f"must be one of {list(OUTPUT_DTYPES)}")
        return v

    @field_validator("output_types")
    @classmethod
    def _types(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("must name at least one output type")
        return list(dict.fromkeys(v))


class EncodeRequest(BaseModel):
    """POST /v1/encode/{model}: encode `items`."""

    model_config = ConfigDict(extra="forbid")

    items: list[Item]
    params: EncodeRequestParams = Field(default_factory=EncodeRequestParams)


def _describe(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _check_media(items: object) -> None:
    if isinstance(items, list):
        for i, item in enumerate(items):
            if isinstance(item, dict) and any(k in item for k in UNSUPPORTED_MEDIA):
                raise InvalidInput(f"items.{i}: only text items are supported; images and audio are not")


def parse_items_body(kind: type[BodyT], body: object, max_items: int | None, shape: str, empty: str) -> BodyT:
    """Validate a decoded body with an `items` list as `kind`, or raise INVALID_INPUT; with `max_items`, an
    over-long item list is 413 before any item is validated. `shape` names what the map holds."""
    if not isinstance(body, dict):
        raise InvalidInput(f"the request body must be a map with {shape}")
    if max_items is not None:
        count_before_parsing(body, "items", max_items)
    _check_media(body.get("items"))
    try:
        req = kind.model_validate(body)
    except ValidationError as e:
        raise InvalidInput(_describe(e)) from None
    if not getattr(req, "items", None):
        raise InvalidInput(empty)
    return req


def parse_encode(body: object, max_items: int | None = None) -> EncodeRequest:
    """Validate an encode body (already decoded from msgpack or JSON) or raise INVALID_INPUT."""
    return parse_items_body(EncodeRequest, body, max_items, "'items'", "items must not be empty")


def item_body(item: ItemInput) -> JSONObject:
    """One client item as the wire carries it: a text becomes {"text": ...}; a map is copied."""
    return {"text": item} if isinstance(item, str) else dict(item)


def item_bodies(items: Sequence[ItemInput]) -> list[JSONObject]:
    return [item_body(it) for it in items]


def build_encode_body(
    items: Sequence[ItemInput],
    *,
    output_types: list[str] | None = None,
    instruction: str | None = None,
    output_dtype: str | None = None,
    is_query: bool | None = None,
    options: Options | None = None,
) -> EncodeBody:
    """The wire body for an encode call; shared by every client so they all send the same thing."""
    opts = dict(options or {})
    if is_query is not None:
        opts["is_query"] = is_query
    params: EncodeBodyParams = {}
    if output_types is not None:
        params["output_types"] = output_types
    if instruction is not None:
        params["instruction"] = instruction
    if output_dtype is not None:
        params["output_dtype"] = output_dtype
    if opts:
        params["options"] = opts
    body: EncodeBody = {"items": item_bodies(items)}
    if params:
        body["params"] = params
    return body


class ScoreOptions(BaseModel):
    """Runtime switches of one score request (unknown keys are ignored, as SIE clients may send more)."""

    model_config = ConfigDict(extra="ignore")

    truncate: bool | None = None
    profile: str | None = None
    lora: str | None = None
    precision: str | None = None


class ScoreRequest(BaseModel):
    """POST /v1/score/{model}: rank `items` against `query`."""

    model_config = ConfigDict(extra="forbid")

    query: Item
    items: list[Item]
    instruction: str | None = None
    options: ScoreOptions = Field(default_factory=ScoreOptions)


def parse_score(body: object, max_items: int | None = None) -> ScoreRequest:
    """Validate a score body or raise INVALID_INPUT; at least one candidate is required."""
    if isinstance(body, dict):
        _check_media([body.get("query")])
    empty = "items must not be empty: give at least one candidate to score"
    return parse_items_body(ScoreRequest, body, max_items, "'query' and 'items'", empty)


def build_score_body(
    query: ItemInput,
    items: Sequence[ItemInput],
    *,
    instruction: str | None = None,
    options: Options | None = None,
) -> ScoreBody:
    """The wire body for a score call; shared by every client."""
    body: ScoreBody = {"query": item_body(query), "items": item_bodies(items)}
    if instruction is not None:
        body["instruction"] = instruction
    if options:
        body["options"] = dict(options)
    return body
