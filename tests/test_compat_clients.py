"""Real clients of the other dialects against a live `shoal serve`, each in its own venv: sie-sdk (every
output dtype, score, error classes) and SIE's LangChain and LlamaIndex integrations (Python 3.12), cohere's
ClientV2 (embed, rerank) and huggingface_hub's InferenceClient (feature_extraction, sentence_similarity).
Vectors are compared with sentence-transformers, rerank scores with its CrossEncoder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.compat_support import RERANKER, compat_server, record, run_client
from tests.conftest import MINILM
from tests.helpers import LiveServer, minilm_dir

pytestmark = pytest.mark.compat
TEXTS = ["shoal is wire-compatible with SIE", "rerankers and embedders", "x"]
QUERY, DOCS = "where is paris", ["paris is in france", "a dog barks", "london is in england", "the eiffel tower"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    server, ce = compat_server(tmp_path_factory.mktemp("compat-clients"))
    yield server, ce
    server.stop()


@pytest.fixture(scope="module")
def st() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir()), device="cpu")


@pytest.fixture(scope="module")
def ranked(live: tuple[LiveServer, Path]) -> tuple[list[int], list[float]]:
    """The CrossEncoder's order of DOCS for QUERY and its scores in that order."""
    from sentence_transformers import CrossEncoder

    scores = [float(s) for s in CrossEncoder(str(live[1]), device="cpu").predict([(QUERY, d) for d in DOCS])]
    order = sorted(range(len(DOCS)), key=lambda i: -scores[i])
    return order, [scores[i] for i in order]


def close(got: Any, want: np.ndarray, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want, atol=atol)


SIE = """
import json, sys
import numpy as np
from sie_sdk import SIEClient
from sie_sdk.client.errors import InputTooLongError, RequestError
url, model, reranker, texts, query, docs = sys.argv[1:4] + [json.loads(sys.argv[4]), sys.argv[5], json.loads(sys.argv[6])]
c = SIEClient(url)
out = {"dtypes": {}}
for dtype in ["float32", "float16", "int8", "uint8", "binary", "ubinary"]:
    r = c.encode(model, [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)], output_dtype=dtype)
    out["dtypes"][dtype] = {"ids": [x["id"] for x in r], "np": str(r[0]["dense"].dtype), "values": [x["dense"].tolist() for x in r]}
out["query"] = c.encode(model, {"text": texts[0]}, is_query=True)["dense"].tolist()
s = c.score(reranker, {"id": "q", "text": query}, [{"id": f"d{i}", "text": d} for i, d in enumerate(docs)])
out["score"] = {"query_id": s.get("query_id"), "scores": [[x["item_id"], x["score"], x["rank"]] for x in s["scores"]]}
out["models"] = [m["name"] if isinstance(m, dict) else getattr(m, "name", str(m)) for m in c.list_models()]
errors = {}
for name, call in [("too_long", lambda: c.encode(model, {"text": "word " * 400}, options={"truncate": False})),
                   ("missing", lambda: c.encode("no/such-model", {"text": "x"})),
                   ("bad_dtype", lambda: c.encode(model, {"text": "x"}, output_dtype="int4"))]:
    try:
        call()
        errors[name] = None
    except RequestError as e:
        errors[name] = [type(e).__name__, e.code, e.status_code]
out["errors"] = errors
print(json.dumps(out))
"""


@pytest.mark.slow
def test_sie_sdk(live: tuple[LiveServer, Path], st: Any, ranked: tuple[list[int], list[float]]) -> None:
    args = [live[0].url, MINILM, RERANKER, json.dumps(TEXTS), QUERY, json.dumps(DOCS)]
    got = run_client("sie", SIE, *args)
    want = st.encode(TEXTS)
    dt = got["dtypes"]
    assert all(d["ids"] == ["t0", "t1", "t2"] for d in dt.values())
    assert {k: d["np"] for k, d in dt.items()} == {
        "float32": "float32",
        "float16": "float16",
        "int8": "int8",
        "uint8": "uint8",
        "binary": "uint8",
        "ubinary": "uint8",
    }
    close(dt["float32"]["values"], want)
    close(dt["float16"]["values"], want, atol=1e-3)
    close(np.asarray(dt["int8"]["values"]) / 127, want, atol=1 / 127)
    low, high = want.min(axis=1, keepdims=True), want.max(axis=1, keepdims=True)
    close(np.asarray(dt["uint8"]["values"]) / 255 * (high - low) + low, want, atol=(high - low).max() / 255)
    for kind in ("binary", "ubinary"):  # sentence-transformers' ubinary: packed sign bits
        assert dt[kind]["values"] == np.packbits(want > 0, axis=-1).tolist()
    close(got["query"], st.encode(TEXTS[0]))
    order, scores = ranked
    assert got["score"]["query_id"] == "q"
    assert [s[0] for s in got["score"]["scores"]] == [f"d{i}" for i in order]
    assert [s[2] for s in got["score"]["scores"]] == list(range(len(DOCS)))
    close([s[1] for s in got["score"]["scores"]], np.asarray(scores))
    assert MINILM in got["models"] and RERANKER in got["models"]
    assert got["errors"] == {
        "too_long": ["InputTooLongError", "INPUT_TOO_LONG", 400],
        "missing": ["RequestError", "MODEL_NOT_FOUND", 404],
        "bad_dtype": ["RequestError", "INVALID_INPUT", 400],
    }
    record("sie-sdk", "encode (every output dtype, ids, is_query), score, list_models, error classes")


SIE_INTEGRATIONS = """
import json, sys
url, model, reranker, texts, query, docs = sys.argv[1:4] + [json.loads(sys.argv[4]), sys.argv[5], json.loads(sys.argv[6])]
from langchain_core.documents import Document
from sie_langchain import SIEEmbeddings, SIEReranker
from sie_llamaindex import SIEEmbedding, SIENodePostprocessor
from llama_index.core.schema import NodeWithScore, TextNode, QueryBundle
out = {}
lc = SIEEmbeddings(base_url=url, model=model)
out["lc_docs"], out["lc_query"] = lc.embed_documents(texts), lc.embed_query(texts[0])
kept = SIEReranker(base_url=url, model=reranker, top_k=2).compress_documents([Document(page_content=d) for d in docs], query)
out["lc_rerank"] = [[d.page_content, d.metadata.get("relevance_score")] for d in kept]
li = SIEEmbedding(base_url=url, model_name=model)
out["li_docs"], out["li_query"] = li.get_text_embedding_batch(texts), li.get_query_embedding(texts[0])
nodes = [NodeWithScore(node=TextNode(text=d), score=0.0) for d in docs]
post = SIENodePostprocessor(base_url=url, model=reranker, top_n=2).postprocess_nodes(nodes, query_bundle=QueryBundle(query))
out["li_rerank"] = [[n.node.get_content(), n.score] for n in post]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_sie_integrations(live: tuple[LiveServer, Path], st: Any, ranked: tuple[list[int], list[float]]) -> None:
    args = [live[0].url, MINILM, RERANKER, json.dumps(TEXTS), QUERY, json.dumps(DOCS)]
    got = run_client("sie", SIE_INTEGRATIONS, *args)
    want = st.encode(TEXTS)
    order, scores = ranked
    for docs, query in (("lc_docs", "lc_query"), ("li_docs", "li_query")):
        close(got[docs], want)
        close(got[query], st.encode(TEXTS[0]))
    for key in ("lc_rerank", "li_rerank"):
        assert [r[0] for r in got[key]] == [DOCS[i] for i in order[:2]], key
        close([r[1] for r in got[key]], np.asarray(scores[:2]))
    record("sie-langchain", "SIEEmbeddings embed_documents/embed_query, SIEReranker compress_documents")
    record("sie-llamaindex", "SIEEmbedding text/query embeddings, SIENodePostprocessor")


COHERE = """
import json, sys
import cohere
url, model, reranker, texts, query, docs = sys.argv[1:4] + [json.loads(sys.argv[4]), sys.argv[5], json.loads(sys.argv[6])]
co = cohere.ClientV2(api_key="unused", base_url=url)
kinds = ["float", "int8", "uint8", "binary", "ubinary"]
e = co.embed(model=model, texts=texts, input_type="search_document", embedding_types=kinds)
out = {k: getattr(e.embeddings, k) for k in kinds}
out["query"] = co.embed(model=model, texts=texts[:1], input_type="search_query", embedding_types=["float"]).embeddings.float_
r = co.rerank(model=reranker, query=query, documents=docs, top_n=3)
out["rerank"] = [[x.index, x.relevance_score] for x in r.results]
try:
    co.embed(model="no/such-model", texts=["x"], input_type="search_query", embedding_types=["float"])
    out["error"] = None
except cohere.core.api_error.ApiError as err:
    out["error"] = [type(err).__name__, err.status_code, err.body.get("code")]
print(json.dumps(out, default=lambda o: None))
"""


@pytest.mark.slow
def test_cohere_v2(live: tuple[LiveServer, Path], st: Any, ranked: tuple[list[int], list[float]]) -> None:
    args = [live[0].url, MINILM, RERANKER, json.dumps(TEXTS), QUERY, json.dumps(DOCS)]
    got = run_client(
        "cohere",
        COHERE.replace("getattr(e.embeddings, k)", "getattr(e.embeddings, k + '_' if k == 'float' else k)"),
        *args,
    )
    want = st.encode(TEXTS)
    close(got["float"], want)
    close(got["query"], st.encode(TEXTS[:1]))
    from sentence_transformers.quantization import quantize_embeddings

    assert got["binary"] == quantize_embeddings(want, precision="binary").tolist()
    assert got["ubinary"] == quantize_embeddings(want, precision="ubinary").tolist()
    close(np.asarray(got["int8"]) / 127, want, atol=1 / 127)
    assert np.asarray(got["uint8"]).min() == 0 and np.asarray(got["uint8"]).max() == 255
    order, scores = ranked
    assert [r[0] for r in got["rerank"]] == order[:3]
    close([r[1] for r in got["rerank"]], np.asarray(scores[:3]))
    assert got["error"] == ["NotFoundError", 404, "MODEL_NOT_FOUND"]
    record("cohere", "ClientV2 embed (float, int8, uint8, binary, ubinary), rerank, errors")


HF = """
import json, sys
from huggingface_hub import InferenceClient
url, texts = sys.argv[1], json.loads(sys.argv[2])
c = InferenceClient(base_url=url)
out = {"one": c.feature_extraction(texts[0]).tolist(), "normalized": c.feature_extraction(texts[1], normalize=True, truncate=True).tolist()}
out["similarity"] = c.sentence_similarity(texts[0], other_sentences=texts)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_huggingface_hub_inference_client(live: tuple[LiveServer, Path], st: Any) -> None:
    # the client talks only to this loopback server, so the hub's offline switch is off for it
    got = run_client("huggingface-hub", HF, live[0].url, json.dumps(TEXTS), env={"HF_HUB_OFFLINE": "0"})
    want = st.encode(TEXTS)
    close(got["one"], want[:1])
    close(got["normalized"], want[1:2])
    close(got["similarity"], want @ want[0])
    record("huggingface-hub", "InferenceClient feature_extraction, sentence_similarity (POST /)")
