"""The last client incompatibilities, each one request: infinity_client's `dimensions: 0`, Cohere v1's
POST /v1/embed (and a Cohere body posted to TEI's POST /, as litellm's cohere/ route does), `raw_scores` on
the Infinity and Cohere-style rerank routes, Infinity's GET /models and /health. Plain HTTP against a live
`shoal serve`, and (marked compat) the real cohere and litellm clients in their own venvs."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.compat_support import RERANKER, compat_server, run_client
from tests.conftest import MINILM
from tests.helpers import LiveServer, minilm_dir

pytestmark = pytest.mark.slow
TEXTS = ["shoal serves small models", "x"]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    server, ce = compat_server(tmp_path_factory.mktemp("hardening-clients"))
    yield server, ce
    server.stop()


@pytest.fixture(scope="module")
def want() -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return np.asarray(SentenceTransformer(str(minilm_dir()), device="cpu").encode(TEXTS))


def close(got: Any, want: np.ndarray) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want, atol=1e-5)


@pytest.mark.parametrize("path", ["/infinity/embeddings", "/embeddings"])
def test_dimensions_0_means_not_set_on_infinity_routes(live: tuple[LiveServer, Path], want: Any, path: str) -> None:
    body = {"model": MINILM, "input": TEXTS, "dimensions": 0, "encoding_format": "float"}
    r = httpx.post(live[0].url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    close([d["embedding"] for d in r.json()["data"]], want)


def test_dimensions_0_stays_an_error_for_openai(live: tuple[LiveServer, Path]) -> None:
    r = httpx.post(f"{live[0].url}/v1/embeddings", json={"model": MINILM, "input": "x", "dimensions": 0}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT"


@pytest.mark.parametrize("path", ["/v1/embed", "/"])
def test_cohere_v1_embed(live: tuple[LiveServer, Path], want: Any, path: str) -> None:
    body = {"model": MINILM, "texts": TEXTS, "input_type": "search_document", "truncate": "END"}
    r = httpx.post(live[0].url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["response_type"] == "embeddings_floats" and out["texts"] == TEXTS
    close(out["embeddings"], want)
    r = httpx.post(live[0].url + path, json={**body, "embedding_types": ["float"]}, timeout=120)
    assert r.json()["response_type"] == "embeddings_by_type"
    close(r.json()["embeddings"]["float"], want)


def test_cohere_v1_embed_without_a_model_uses_the_default(live: tuple[LiveServer, Path], want: Any) -> None:
    r = httpx.post(f"{live[0].url}/v1/embed", json={"texts": TEXTS}, timeout=120)
    assert r.status_code == 200, r.text
    close(r.json()["embeddings"], want)


@pytest.mark.parametrize("path", ["/v1/rerank", "/infinity/rerank"])
def test_raw_scores_are_the_logits_as_on_tei(live: tuple[LiveServer, Path], path: str) -> None:
    url = live[0].url
    docs = ["paris is in france", "a dog barks"]
    tei = httpx.post(f"{url}/rerank", json={"model": RERANKER, "query": "paris", "texts": docs, "raw_scores": True})
    logits = {x["index"]: x["score"] for x in tei.json()}
    body = {"model": RERANKER, "query": "paris", "documents": docs}
    raw = httpx.post(url + path, json={**body, "raw_scores": True}, timeout=120).json()["results"]
    plain = httpx.post(url + path, json=body, timeout=120).json()["results"]
    for r in raw:
        assert math.isclose(r["relevance_score"], logits[r["index"]], rel_tol=1e-5, abs_tol=1e-6)
    sig = {p["index"]: p["relevance_score"] for p in plain}
    for r in raw:
        assert math.isclose(1 / (1 + math.exp(-r["relevance_score"])), sig[r["index"]], rel_tol=1e-4)
    bad = httpx.post(url + path, json={**body, "raw_scores": "yes"}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_INPUT"


@pytest.mark.parametrize("prefix", ["", "/infinity"])
def test_infinity_models_and_health(live: tuple[LiveServer, Path], prefix: str) -> None:
    r = httpx.get(f"{live[0].url}{prefix}/models", timeout=60)
    assert r.status_code == 200
    data = {m["id"]: m for m in r.json()["data"]}
    assert "embed" in data[MINILM]["capabilities"] and data[MINILM]["object"] == "model"
    h = httpx.get(f"{live[0].url}{prefix}/health", timeout=60)
    assert h.status_code == 200 and isinstance(h.json()["unix"], float)


COHERE_V1 = """
import json, sys
import cohere
url, model, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
co = cohere.Client(api_key="unused", base_url=url)
e = co.embed(model=model, texts=texts, input_type="search_document")
print(json.dumps({"embeddings": e.embeddings}))
"""

LITELLM_COHERE = """
import json, sys
import litellm
url, model, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
r = litellm.embedding(model=f"cohere/{model}", input=texts, api_base=url, api_key="unused")
print(json.dumps({"embeddings": [d["embedding"] for d in r.data]}))
"""


@pytest.mark.compat
def test_cohere_v1_client(live: tuple[LiveServer, Path], want: Any) -> None:
    got = run_client("cohere", COHERE_V1, live[0].url, MINILM, json.dumps(TEXTS))
    close(got["embeddings"], want)


@pytest.mark.compat
def test_litellm_cohere_route_with_an_api_base(live: tuple[LiveServer, Path], want: Any) -> None:
    got = run_client("litellm", LITELLM_COHERE, live[0].url, MINILM, json.dumps(TEXTS))
    close(got["embeddings"], want)
