"""What each tool answers: the JSON object of its result (HTTP, MCP and the Python functions give the same).

TypedDicts, so at run time they are the plain dicts that are serialised; to mypy each field has its type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NotRequired, TypedDict

if TYPE_CHECKING:
    from agent_tools.taxonomy.tree import Taxonomy
    from engine.tasks.results import Entity, JSONObject

ModelCallCounts = dict[str, int]  # requests and items per task kind (agent_tools.backend.CallCount)


class NodeScore(TypedDict):
    """One taxonomy node on the best path of an answer."""

    id: str
    name: str
    label: str
    score: float | None  # None: a node the search did not score
    confidence: float


class LeafScore(TypedDict):
    """A candidate leaf of an answer: the best one or a runner-up."""

    id: str
    name: str
    label: str
    score: float
    path_score: float  # the similarity plus the weighted scores of the nodes above it
    confidence: float


class Classified(TypedDict):
    """One text's place in the taxonomy: the deepest confident node ("" when nothing fits) and the evidence."""

    label: str
    id: str | None
    path: list[str]
    is_leaf: bool
    confidence: float | None
    levels: list[NodeScore]
    best_leaf: LeafScore
    alternatives: list[LeafScore]
    off_topic: str | None  # the general topic outside the taxonomy the text is closer to than to every leaf


def node_out(t: Taxonomy, node: int, score: float | None, confidence: float) -> NodeScore:
    """A node on the best path (its score is None when the search never scored it)."""
    rounded = None if score is None else round(float(score), 6)
    return {
        "id": t.ids[node],
        "name": t.names[node],
        "label": t.labels[node],
        "score": rounded,
        "confidence": round(confidence, 6),
    }


def leaf_out(t: Taxonomy, node: int, score: float, confidence: float, path_score: float) -> LeafScore:
    """A candidate leaf: the best one or a runner-up, with its path score."""
    return {
        "id": t.ids[node],
        "name": t.names[node],
        "label": t.labels[node],
        "score": round(float(score), 6),
        "path_score": round(float(path_score), 6),
        "confidence": round(confidence, 6),
    }


class TaxonomyInfo(TypedDict):
    """Which taxonomy a classification used, and how it was calibrated."""

    digest: str
    nodes: int
    leaves: int
    fitted: bool
    calibration: str


class ClassifyResult(TypedDict):
    """classify_taxonomy: one answer per text, in order."""

    results: list[Classified]
    taxonomy: TaxonomyInfo
    model_calls: ModelCallCounts


class KeptPassage(TypedDict):
    """One passage filter_context kept (offsets into the text when one text was split)."""

    index: int
    score: float
    tokens: int
    text: str
    start: NotRequired[int]
    end: NotRequired[int]


class FilterResult(TypedDict):
    """filter_context: the kept passages in document order, and how much was cut."""

    passages: list[KeptPassage]
    text: str
    tokens_before: int
    tokens_after: int
    reduction: float
    kept: int
    dropped: int
    scorer: str
    model_calls: ModelCallCounts


class Ranked(TypedDict):
    """One document, with its position in the input and its score."""

    index: int
    score: float
    text: str


class RerankResult(TypedDict):
    """rerank: the documents best first."""

    scorer: str
    results: list[Ranked]
    model_calls: ModelCallCounts


class SearchResult(TypedDict):
    """search: the best chunks; each is {id, score, text} and its plain metadata (the store's own fields)."""

    db: str
    collection: str
    results: list[JSONObject]


class EmbedResult(TypedDict):
    """embed: one vector per text, in order."""

    model: str
    dims: int
    embeddings: list[list[float]]
    model_calls: ModelCallCounts


class TextEntities(TypedDict):
    """The entities found in one text."""

    index: int
    entities: list[Entity]


class ExtractEntitiesResult(TypedDict):
    """extract_entities: the entities of each text, in order."""

    model: str
    results: list[TextEntities]
    model_calls: ModelCallCounts


ToolResult = ClassifyResult | FilterResult | RerankResult | SearchResult | EmbedResult | ExtractEntitiesResult
