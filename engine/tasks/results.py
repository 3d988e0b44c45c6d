"""The typed result of each task kind, as a worker returns it and every seam after it passes it on.

They are TypedDicts: at run time plain dicts, so they index, compare and serialise (JSON, msgpack) exactly as
the dicts they replace, and the NATS msgpack form decodes to the same type with no conversion; to mypy each
field has its type. In process a vector's `values` is a numpy array; after JSON it is a list of numbers.
A reply read back at a boundary is validated against them by pydantic (engine/tasks/checked.py), which on Python
3.11 needs typing_extensions' TypedDict.
"""

from __future__ import annotations

from typing import Annotated, NotRequired

import numpy as np
import numpy.typing as npt
from pydantic import PlainValidator
from typing_extensions import TypeAliasType, TypedDict


def _numbers(value: object) -> object:
    """A reply's array as it came (numpy from msgpack, nested lists from JSON), checked to hold only numbers."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return value
    if isinstance(value, list):
        try:
            if np.asarray(value, dtype=np.float64).ndim >= 1 or not value:
                return value
        except (TypeError, ValueError):
            pass
    raise ValueError("an array of numbers")


# an array in process, a list after JSON; a reply read back at a boundary is checked to hold numbers only
Values = Annotated[npt.NDArray[np.generic] | list[float] | list[int], PlainValidator(_numbers)]
JSONScalar = str | int | float | bool | None
JSONValue = TypeAliasType("JSONValue", "JSONScalar | list[JSONValue] | dict[str, JSONValue]")  # recursive
JSONObject = dict[str, JSONValue]  # a JSON object whose shape is the caller's (request bodies, metadata)


class Usage(TypedDict):
    """Tokens the task's model read."""

    input_tokens: int


class Timing(TypedDict, total=False):
    """Where the task's time went, in milliseconds; the worker fills the first three, the engine the total."""

    queue_ms: float
    tokenization_ms: float
    inference_ms: float
    total_ms: float


class DenseVector(TypedDict):
    """One text's sentence vector."""

    dims: int
    dtype: str
    values: Values  # [dims] (packed bits for binary dtypes)


class MultiVector(TypedDict):
    """One text's token vectors (late interaction)."""

    token_dims: int
    num_tokens: int
    dtype: str
    values: Values  # [num_tokens, token_dims]


class SparseVector(TypedDict):
    """One text's vocabulary weights: the non-zero ids and their weights."""

    dims: NotRequired[int]  # the vocabulary size; shoal always sends it, the wire contract makes it optional
    dtype: str
    indices: Values
    values: Values


class EncodedItem(TypedDict, total=False):
    """One input's outputs, those the request asked for."""

    id: str
    dense: DenseVector
    multivector: MultiVector
    sparse: SparseVector


class EncodeReply(TypedDict):
    """An encode task's answer, in input order."""

    items: list[EncodedItem]
    usage: NotRequired[Usage]  # shoal always sends it; other SIE-compatible servers may not
    timing: NotRequired[Timing]
    model: NotRequired[str]
    precision: NotRequired[str]  # the precision of the model that served it


class ScoreEntry(TypedDict):
    """One candidate's relevance; rank 0 is the best."""

    item_id: str
    score: float
    rank: int


class ScoreReply(TypedDict):
    """A score task's answer, best first."""

    scores: list[ScoreEntry]
    usage: NotRequired[Usage]  # shoal always sends it; other SIE-compatible servers may not
    query_id: NotRequired[str]
    timing: NotRequired[Timing]
    model: NotRequired[str]
    precision: NotRequired[str]  # the precision of the model that served it


class Entity(TypedDict):
    """One span found in a text, with character offsets into it."""

    text: str
    label: str
    score: float
    start: int
    end: int


class Classification(TypedDict):
    """One label given to a text."""

    label: str
    score: float


class ExtractedItem(TypedDict):
    """What was found in one input."""

    id: str
    entities: list[Entity]
    classifications: list[Classification]
    data: JSONObject


class ExtractReply(TypedDict):
    """An extract task's answer, in input order."""

    items: list[ExtractedItem]
    usage: NotRequired[Usage]  # shoal always sends it; other SIE-compatible servers may not
    timing: NotRequired[Timing]
    model: NotRequired[str]
    precision: NotRequired[str]  # the precision of the model that served it


Reply = EncodeReply | ScoreReply | ExtractReply  # what a task settles with
