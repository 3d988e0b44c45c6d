"""Request bodies for the OpenAPI document: the routes read raw bodies (msgpack or JSON), so each POST route
declares its body here with `openapi_extra=request_body(Model)`, and /docs shows and validates it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from engine.tasks.results import JSONObject, JSONValue


def _inline(node: JSONValue, defs: JSONObject) -> JSONValue:
    if isinstance(node, dict):
        return _inline_map(node, defs)
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _inline_map(node: JSONObject, defs: JSONObject) -> JSONObject:
    """The schema with every local `$ref` replaced by its definition (the bodies hold no recursive types)."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs[ref.rsplit("/", 1)[-1]]
        if isinstance(target, dict):
            return _inline_map(target, defs)
    return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}


def schema_of(model: type[BaseModel]) -> JSONObject:
    schema: JSONObject = model.model_json_schema()
    defs = schema.get("$defs")
    return _inline_map(schema, defs if isinstance(defs, dict) else {})


def request_body(model: type[BaseModel], *, msgpack: bool = True) -> JSONObject:
    """`openapi_extra` for a route whose body is `model`, as JSON (and msgpack, on native routes)."""
    schema = schema_of(model)
    content: JSONObject = {"application/json": {"schema": schema}}
    if msgpack:
        content["application/msgpack"] = {"schema": schema}
    return {"requestBody": {"required": True, "content": content}}


class EmbeddingsBody(BaseModel):
    """POST /v1/embeddings (OpenAI): texts, or token-id arrays (cl100k ids are decoded)."""

    model: str
    input: str | list[str] | list[int] | list[list[int]]
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
    raw_scores: bool = Field(False, description="the logits behind sigmoid scores (Infinity, TEI)")


TokenIds = list[int]


class TeiEmbedBody(BaseModel):
    """POST /embed, /embed_sparse and / (Hugging Face TEI): texts or token-id arrays."""

    inputs: str | list[str] | TokenIds | list[TokenIds] | dict[str, Any] = Field(
        description="texts or token ids; on POST /, {source_sentence, sentences} for similarity scores"
    )
    model: str | None = Field(None, description="default: the server's default model")
    normalize: bool | None = None
    truncate: bool | None = None
    truncation_direction: Literal["Right"] = "Right"
    prompt_name: str | None = Field(None, description="query or document")
    dimensions: int | None = Field(None, ge=1)
    parameters: dict[str, Any] | None = Field(None, description="the same options, nested (huggingface_hub)")


class TeiRerankBody(BaseModel):
    """POST /rerank: TEI's {query, texts} (or, with `documents`, the /v1/rerank shape)."""

    query: str
    texts: list[str] | None = None
    documents: list[str | dict[str, str]] | None = Field(None, description="instead of texts: /v1/rerank's shape")
    model: str | None = None
    truncate: bool | None = None
    raw_scores: bool | None = None
    return_text: bool | None = None
    top_n: int | None = Field(None, ge=1)
    return_documents: bool | None = None


class TeiPredictBody(BaseModel):
    """POST /predict: a [text, text_pair] pair or a list of pairs, scored by a reranker."""

    inputs: list[str] | list[list[str]]
    model: str | None = None
    raw_scores: bool | None = None
    truncate: bool | None = None


class TeiTokenizeBody(BaseModel):
    """POST /tokenize."""

    inputs: str | list[str]
    model: str | None = None
    add_special_tokens: bool | None = None


class CohereEmbedBody(BaseModel):
    """POST /v2/embed (Cohere v2)."""

    model: str
    texts: list[str] | None = None
    inputs: list[dict[str, Any]] | None = Field(None, description="[{content: [{type: text, text}]}]")
    input_type: str = "search_document"
    embedding_types: list[str] | None = Field(None, description="float, int8, uint8, binary, ubinary, base64")
    truncate: Literal["NONE", "END"] = "END"
    output_dimension: int | None = Field(None, ge=1)


class CohereRerankBody(BaseModel):
    """POST /v2/rerank (Cohere v2)."""

    model: str
    query: str
    documents: list[str | dict[str, str]]
    top_n: int | None = Field(None, ge=1)
    return_documents: bool | None = None
    max_tokens_per_doc: int | None = None
