"""The options of a taxonomy classification (what `classify_taxonomy` accepts besides the texts)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ClassifyOptions(BaseModel):
    """How to answer: every leaf is scored; these say how deep the answer goes and what comes with it."""

    threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="confidence needed to go one level deeper; 0 always returns a leaf; default: the node with "
        "the best expected hierarchical F1 under the calibrated confidence",
    )
    alternatives: int = Field(3, ge=0, le=50, description="runner-up leaves to return")
    rerank_model: str | None = Field(None, description="cross-encoder that rescores the best leaves")
    rerank_top: int = Field(10, ge=1, le=1000, description="best leaves rescored by rerank_model")
    sentences: bool = Field(
        False, description="also score a text of several sentences by its best sentence (mean of the two scores)"
    )
    off_topic: bool = Field(
        False,
        description="let general topics outside the taxonomy (weather, recipes, sports, ...) compete with the "
        'leaves, so a text closer to one of them than to every leaf can be answered ""',
    )
