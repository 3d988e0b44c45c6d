"""The typed task envelope the queue carries from the gateway to a worker, with its resolved params.

Every default (truncation, normalisation, instruction or card prefix, LoRA adapter) is resolved once when the
task is made (engine.tasks.annotate); workers and handlers read these fields and nothing else. On NATS the
envelope travels as msgpack (`to_wire`), and `from_wire` gives back an equal Task.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from engine.catalogue.cards import Precision, TaskKind

OutputType = Literal["dense", "sparse", "multivector"]
OutputDtype = Literal["float32", "float16", "int8", "uint8", "binary", "ubinary"]
OUTPUT_DTYPES: tuple[str, ...] = get_args(OutputDtype)


class TaskItem(BaseModel):
    """One input of a task: its text and the caller's id, if any."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    text: str


class EncodeParams(BaseModel):
    """How to encode: what to output, in which dtype, and the resolved input and output switches."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["encode"] = "encode"
    output_types: tuple[OutputType, ...] = ("dense",)
    output_dtype: OutputDtype = "float32"
    prefix: str = ""  # the request's instruction, else the card's query or document instruction
    is_query: bool = False
    normalize: bool = True
    dimensions: int | None = None  # Matryoshka truncation; None keeps every dimension
    truncate: bool = True
    adapter: str | None = None  # LoRA adapter name; None: the base model


class ScoreParams(BaseModel):
    """How to score: the query as the model reads it, and the resolved switches."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["score"] = "score"
    query: str  # with the instruction or card prefix applied where the card's score kind wants it
    query_id: str | None = None
    document_prefix: str = ""  # late interaction: the card's document instruction
    instruction: str = ""  # yes/no rerankers: the instruction their prompt template takes
    truncate: bool = True
    adapter: str | None = None


class ExtractParams(BaseModel):
    """How to extract: the mode the card runs in, the labels and the resolved thresholds and switches.

    `hypotheses` holds one text per label: the NLI hypothesis (nli) or the label's description (embedding).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["extract"] = "extract"
    mode: Literal["entities", "nli", "embedding"]
    labels: tuple[str, ...]
    threshold: float
    flat_ner: bool = True
    multi_label: bool = False
    hypotheses: tuple[str, ...] = ()
    prefix: str = ""  # embedding: the instruction or card document prefix of the items
    label_prefix: str = ""  # embedding: the card's query prefix of the label descriptions
    temperature: float = 0.05  # embedding, single-label: softmax over cosine / temperature
    truncate: bool = True  # nli, embedding: over-long items are truncated (GLiNER windows them instead)


TaskParams = Annotated[EncodeParams | ScoreParams | ExtractParams, Field(discriminator="kind")]


class Task(BaseModel):
    """One request as the gateway annotated it: model, items, resolved params, cost estimate, deadline."""

    model_config = ConfigDict(extra="forbid")

    model: str
    items: list[TaskItem]
    params: TaskParams
    est_tokens: int
    deadline: float  # time.time() after which nobody waits for the answer
    tenant: str | None = None
    precision: Precision | None = None  # the precision the request asked to be served in; None: the engine's choice
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    enqueued_at: float = Field(default_factory=time.time)

    @property
    def kind(self) -> TaskKind:
        return self.params.kind

    def to_wire(self) -> dict[str, object]:
        """Plain data for msgpack."""
        return self.model_dump()

    @classmethod
    def from_wire(cls, data: object) -> Task:
        """The Task `to_wire` described (validated: a malformed message is an error, never a half-task)."""
        return cls.model_validate(data)
