"""TEI routes (text-embeddings-inference): /embed, /embed_sparse, /rerank (with `texts`), /predict, /tokenize,
GET /info, and POST / (what huggingface_hub's InferenceClient posts: feature extraction and sentence
similarity), in TEI's request and response shapes.

TEI serves one model; these routes use the body's `model` when it names one (an extension), else
`EngineSettings.default_model` (embeddings, tokens) or `default_rerank_model` (/rerank, /predict). As
TEI with `--auto-truncate`, an absent `truncate` truncates; `truncate: false` refuses over-long input.
Token-id `inputs` are ids of the model's own tokenizer (as in TEI). Errors answer `{"error", "error_type"}`.
"""

from __future__ import annotations

import asyncio

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from engine.errors import InvalidInput, ShoalError
from engine.http.bodies import TeiEmbedBody, TeiPredictBody, TeiRerankBody, TeiTokenizeBody, request_body
from engine.http.cohere import embed_reply
from engine.http.replies import RouteFamily, engine_of, name_model, read_json_body, timing_headers
from engine.http.rerank import RERANK_BODY, documents_rerank, model_query, raw, rerank, text_list
from engine.runtime import AsyncEngine
from engine.tasks.annotate import check_limits
from engine.tasks.requests import EncodeOptions, EncodeRequest, EncodeRequestParams, Item
from engine.tasks.results import EncodedItem, EncodeReply, JSONObject, JSONValue
from engine.tasks.task import OutputType
from engine.tasks.token_input import parse_input
from engine.wire import Decoded, DecodedMap, as_map

router = APIRouter()
ERROR_TYPES = {"QUEUE_FULL": "Overloaded", "MODEL_LOADING": "Overloaded", "RESOURCE_EXHAUSTED": "Overloaded"}
ERROR_TYPES |= {"MODEL_LOAD_FAILED": "Backend", "INTERNAL": "Backend", "DEADLINE_EXCEEDED": "Backend"}
ERROR_TYPES |= {"RATE_LIMITED": "Overloaded", "MODEL_UNAVAILABLE": "Unhealthy", "UNREACHABLE": "Unhealthy"}
PROMPTS = {"query": True, "document": False, "passage": False}


def tei_error(err: ShoalError) -> JSONObject:
    """TEI's error body: TEI's error types (Validation for bad input, Overloaded for back-pressure, Unhealthy
    for a model that cannot run here, Backend for a failure while running)."""
    return {"error": err.message, "error_type": ERROR_TYPES.get(err.code, "Validation"), "code": err.code}


def tei_body(raw: Decoded) -> DecodedMap:
    """The body as one flat map: huggingface_hub may nest the options under `parameters`."""
    body = as_map(raw, "the body must be a JSON object with 'inputs'")
    params = body.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise InvalidInput("'parameters' must be an object of options (normalize, truncate, ...)")
    return {**params, **body} if isinstance(params, dict) else body


def flag(body: DecodedMap, key: str) -> bool | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise InvalidInput(f"'{key}' must be true or false")
    return value


def encode_options(body: DecodedMap) -> EncodeOptions:
    """normalize, truncate, truncation_direction, prompt_name and dimensions as encode options."""
    if body.get("truncation_direction", "Right") != "Right":
        raise InvalidInput("'truncation_direction' must be 'Right' (Left is not supported)")
    prompt = body.get("prompt_name")
    if prompt is not None and (not isinstance(prompt, str) or prompt not in PROMPTS):
        raise InvalidInput(f"'prompt_name' must be one of {sorted(PROMPTS)}")
    dims = body.get("dimensions")
    if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool) or dims < 1):
        raise InvalidInput("'dimensions' must be a positive integer")
    return EncodeOptions(
        is_query=PROMPTS[prompt] if prompt is not None else None,
        normalize=flag(body, "normalize"),
        truncate=flag(body, "truncate"),
        dimensions=dims,
    )


async def texts_of(engine: AsyncEngine, model: str, value: Decoded) -> list[str]:
    """`inputs` as texts: strings as they are, token-id arrays decoded with the model's tokenizer."""
    parsed = parse_input(value)
    if parsed and isinstance(parsed[0], str):
        return [t for t in parsed if isinstance(t, str)]
    return await engine.detokenize(model, [a for a in parsed if isinstance(a, list)])


def model_of(request: Request, body: DecodedMap, default: str) -> str:
    model = body.get("model", default)
    if not isinstance(model, str) or not model:
        raise InvalidInput("'model' must be a model id")
    name_model(request, model)
    return model


async def encode(request: Request, body: DecodedMap, output: OutputType) -> tuple[list[EncodedItem], EncodeReply]:
    """Encode `inputs` for one output type; (wire items, native result)."""
    engine = engine_of(request)
    model = model_of(request, body, engine.settings.default_model)
    texts = await texts_of(engine, model, body.get("inputs"))
    params = EncodeRequestParams(output_types=[output], options=encode_options(body))
    result = await engine.run(model, EncodeRequest(items=[Item(text=t) for t in texts], params=params))
    return result["items"], result


def reply(content: JSONValue, result: EncodeReply) -> JSONResponse:
    return JSONResponse(content, headers=timing_headers(result.get("timing", {})))


@router.post("/embed", openapi_extra=request_body(TeiEmbedBody, msgpack=False))
async def embed(request: Request) -> Response:
    """{inputs, normalize?, truncate?, prompt_name?, dimensions?} -> [[float]]."""
    items, result = await encode(request, tei_body(await read_json_body(request)), "dense")
    return reply(dense_lists(items), result)


def dense_lists(items: list[EncodedItem]) -> list[JSONValue]:
    """Each item's dense vector as a list of floats (TEI's [[float]])."""
    return [np.asarray(it["dense"]["values"], dtype=np.float32).tolist() for it in items]


@router.post("/embed_sparse", openapi_extra=request_body(TeiEmbedBody, msgpack=False))
async def embed_sparse(request: Request) -> Response:
    """{inputs, truncate?} -> [[{index, value}]] (a sparse model, e.g. SPLADE)."""
    items, result = await encode(request, tei_body(await read_json_body(request)), "sparse")
    out: list[JSONValue] = [
        [
            {"index": int(i), "value": float(v)}
            for i, v in zip(it["sparse"]["indices"], it["sparse"]["values"], strict=True)
        ]
        for it in items
    ]
    return reply(out, result)


@router.post("/rerank", openapi_extra=request_body(TeiRerankBody, msgpack=False))
async def rerank_route(request: Request) -> Response:
    """TEI's {query, texts, truncate?, raw_scores?, return_text?} -> [{index, score, text?}]; with
    `documents` instead, the /v1/rerank shape (engine.http.rerank)."""
    body = as_map(await read_json_body(request), RERANK_BODY)
    if "texts" not in body and "documents" in body:
        return await documents_rerank(request, body)
    engine = engine_of(request)
    model, query = model_query(body, engine.settings.default_rerank_model)
    texts = text_list(body.get("texts"), "texts")
    raw_scores = flag(body, "raw_scores")
    ranking = await rerank(engine, request, model, query, texts, flag(body, "truncate"))
    out: list[JSONValue] = []
    for index, score in ranking.order:
        entry: JSONObject = {"index": index, "score": raw(score, engine, model) if raw_scores else score}
        if flag(body, "return_text"):
            entry["text"] = texts[index]
        out.append(entry)
    return JSONResponse(out, headers=timing_headers(ranking.timing))


def pairs_of(value: Decoded) -> tuple[list[tuple[str, str]], bool]:
    """(pairs, batch?) of /predict `inputs`: a [text, text_pair] pair or a list of them."""
    pair = text_pair(value)
    if pair is not None:
        return [pair], False
    if isinstance(value, list) and value:
        pairs = [p for p in map(text_pair, value) if p is not None]
        if len(pairs) == len(value):
            return pairs, True
    raise InvalidInput("'inputs' must be a [text, text_pair] pair or a list of pairs (rerankers score pairs)")


def text_pair(value: Decoded) -> tuple[str, str] | None:
    """A [text, text_pair] list as a pair; None for anything else."""
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], str):
        return value[0], value[1]
    return None


@router.post("/predict", openapi_extra=request_body(TeiPredictBody, msgpack=False))
async def predict(request: Request) -> Response:
    """{inputs: [text, pair] | [[text, pair]], raw_scores?, truncate?} -> [{score, label}] (per pair)."""
    body = tei_body(await read_json_body(request))
    engine = engine_of(request)
    model = model_of(request, body, engine.settings.default_rerank_model)
    pairs, batch = pairs_of(body.get("inputs"))
    check_limits(engine.settings, len(pairs), [])
    raw_scores, truncate = flag(body, "raw_scores"), flag(body, "truncate")
    rankings = await asyncio.gather(*(rerank(engine, request, model, q, [d], truncate) for q, d in pairs))
    preds: list[JSONValue] = [
        [{"score": raw(r.order[0][1], engine, model) if raw_scores else r.order[0][1], "label": "LABEL_0"}]
        for r in rankings
    ]
    return JSONResponse(preds if batch else preds[0])


@router.post("/tokenize", openapi_extra=request_body(TeiTokenizeBody, msgpack=False))
async def tokenize(request: Request) -> Response:
    """{inputs: str | [str], add_special_tokens?} -> [[{id, text, special, start, stop}]]."""
    body = tei_body(await read_json_body(request))
    engine = engine_of(request)
    model = model_of(request, body, engine.settings.default_model)
    value = body.get("inputs")
    texts = [value] if isinstance(value, str) else text_list(value, "inputs")
    check_limits(engine.settings, len(texts), [(f"inputs.{i}", t) for i, t in enumerate(texts)])
    special = flag(body, "add_special_tokens")
    tok = (await engine.tokenizer(model)).tokenizer
    encodings = tok.encode_batch(texts, add_special_tokens=special is not False)
    out: list[JSONValue] = [
        [
            {"id": i, "text": t, "special": bool(s), "start": a if not s else None, "stop": b if not s else None}
            for i, t, s, (a, b) in zip(enc.ids, enc.tokens, enc.special_tokens_mask, enc.offsets, strict=True)
        ]
        for enc in encodings
    ]
    return JSONResponse(out)


@router.get("/info", response_model=None)  # the annotation types the body; FastAPI need not re-validate it
async def info(request: Request) -> JSONObject:
    """TEI's /info for the default model, with this server's limits (clients read max_client_batch_size)."""
    engine = engine_of(request)
    card = engine.card(engine.settings.default_model)
    kind: JSONObject = {"embedding": {"pooling": card.pooling}} if "encode" in card.tasks else {"reranker": {}}
    profile = card.profile(None)
    return {
        "model_id": card.id,
        "model_sha": None,
        "model_dtype": profile.dtype,
        "model_type": kind,
        "max_concurrent_requests": engine.settings.queue_pending_limit,
        "max_input_length": card.max_seq_len,
        "max_batch_tokens": engine.settings.max_batch_tokens or profile.max_batch_tokens,
        "max_batch_requests": None,
        "max_client_batch_size": engine.settings.max_items,
        "auto_truncate": card.truncate,
        "tokenization_workers": 1,
        "version": "shoal",
        "sha": None,
        "docker_label": None,
    }


@router.post("/", openapi_extra=request_body(TeiEmbedBody, msgpack=False))
async def root(request: Request) -> Response:
    """huggingface_hub's InferenceClient: {inputs: {source_sentence, sentences}} -> similarity scores;
    any other `inputs` -> feature extraction ([[float]]); a Cohere embed body ({texts, ...}, what litellm's
    cohere/ route posts to its api_base) -> Cohere v1's answer."""
    raw = await read_json_body(request)
    if isinstance(raw, dict) and "texts" in raw and "inputs" not in raw:  # a Cohere embed body (litellm cohere/)
        return await embed_reply(request, raw, v1=True)
    body = tei_body(raw)
    value = body.get("inputs")
    if not isinstance(value, dict):
        items, result = await encode(request, body, "dense")
        return reply(dense_lists(items), result)
    source, sentences = value.get("source_sentence"), value.get("sentences")
    if not isinstance(source, str):
        raise InvalidInput("inputs.source_sentence must be a string")
    others = text_list(sentences, "inputs.sentences")
    items, result = await encode(request, {**body, "inputs": [source, *others], "normalize": True}, "dense")
    vecs = np.stack([np.asarray(it["dense"]["values"], dtype=np.float32) for it in items])
    return reply([float(s) for s in vecs[1:] @ vecs[0]], result)


FAMILY = RouteFamily(router, ("/embed", "/embed_sparse", "/rerank", "/predict", "/tokenize", "/info", "/"), tei_error)
