"""Request bodies for the OpenAPI document: the routes read raw bodies (msgpack or JSON), so each POST route
declares its body here with `openapi_extra=request_body(Model)`, and /docs shows and validates it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.tasks.requests import Item


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """The schema with every local `$ref` replaced by its definition (the bodies hold no recursive types)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    out: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return out


def request_body(model: type[BaseModel], *, msgpack: bool = True) -> dict[str, Any]:
    """`openapi_extra` for a route whose body is `model`, as JSON (and msgpack, on native routes)."""
    schema = schema_of(model)
    content: dict[str, Any] = {"application/json": {"schema": schema}}
    if msgpack:
        content["application/msgpack"] = {"schema": schema}
    return {"requestBody": {"required": True, "content": content}}


class ExtractParams(BaseModel):
    """`params` of an extract request."""

    model_config = ConfigDict(extra="allow")

    labels: list[str] | None = Field(None, description="entity or class labels to look for")
    instruction: str | None = None
    options: dict[str, Any] | None = Field(None, description="e.g. {threshold: 0.5}")


class ExtractBody(BaseModel):
    """POST /v1/extract/{model}: items and the labels to find in them."""

    items: list[Item]
    params: ExtractParams | None = None


class EmbeddingsBody(BaseModel):
    """POST /v1/embeddings (OpenAI): one text or a list of texts."""

    model: str
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1, description="Matryoshka truncation")
    user: str | None = Field(None, description="accepted and ignored")


class RerankBody(BaseModel):
    """POST /v1/rerank (Cohere / Jina style)."""

    model: str
    query: str
    documents: list[str | dict[str, str]] = Field(description="strings, or objects with 'text'")
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False
