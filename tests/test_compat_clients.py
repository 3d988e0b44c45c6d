"""Real third-party clients against a live `shoal serve`: sie-sdk (Python 3.12 venv) and openai."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import MINILM
from tests.helpers import REPO, LiveServer

SIE_VENV = REPO / ".cache" / "sie-venv"
TEXTS = ["shoal is wire-compatible with SIE", "rerankers and embedders", "x"]

SIE_SCRIPT = """
import json, sys
from sie_sdk import SIEClient
url, model, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = SIEClient(url)
results = client.encode(model, [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)])
single = client.encode(model, {"text": texts[0]}, output_dtype="float32", is_query=True)
models = [m["name"] if isinstance(m, dict) else getattr(m, "name", str(m)) for m in client.list_models()]
print(json.dumps({
    "ids": [r.get("id") for r in results],
    "dense": [r["dense"].tolist() for r in results],
    "single": single["dense"].tolist(),
    "models": models,
}))
"""


def sie_python() -> Path:
    """A client-only Python 3.12 venv with sie-sdk, made once and reused."""
    py = SIE_VENV / "bin" / "python"
    if py.exists():
        return py
    base = shutil.which("python3.12")
    if base is None:
        pytest.skip("python3.12 is not available to build the sie-sdk client venv")
    env = {**os.environ, "PYENV_VERSION": os.environ.get("SIE_PYENV_VERSION", "3.12.1")}
    subprocess.run([base, "-m", "venv", str(SIE_VENV)], check=True, env=env)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "sie-sdk"], check=True, env=env)
    return py


@pytest.mark.compat
def test_sie_sdk_client_gets_engine_vectors(server: LiveServer, engine: object) -> None:
    py = sie_python()
    out = subprocess.run(
        [str(py), "-c", SIE_SCRIPT, server.url, MINILM, json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    want = engine.encode(MINILM, TEXTS)
    assert got["ids"] == ["t0", "t1", "t2"]
    for vec, ref in zip(got["dense"], want, strict=True):
        np.testing.assert_allclose(np.array(vec, dtype=np.float32), ref["dense"], atol=1e-6)
    np.testing.assert_allclose(got["single"], engine.encode(MINILM, TEXTS[0], is_query=True)["dense"], atol=1e-6)
    assert MINILM in got["models"]


@pytest.mark.compat
def test_openai_client_embeddings(server: LiveServer, engine: object) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    resp = client.embeddings.create(model=MINILM, input=TEXTS)
    want = engine.encode(MINILM, TEXTS)
    assert [d.index for d in resp.data] == [0, 1, 2]
    for d, ref in zip(resp.data, want, strict=True):
        np.testing.assert_allclose(np.array(d.embedding, dtype=np.float32), ref["dense"], atol=1e-6)
    # usage counts the tokens the model read: each text with its special tokens, as MiniLM's tokenizer gives them
    from engine.model.tokenizer import tokenizer_for

    tokens = sum(len(ids) for ids in tokenizer_for(MINILM)(TEXTS, truncate=True))
    assert tokens > len(TEXTS) * 2  # more than the special tokens alone
    assert resp.usage.prompt_tokens == tokens and resp.usage.total_tokens == tokens

    short = client.embeddings.create(model=MINILM, input=TEXTS[0], dimensions=128)
    assert len(short.data[0].embedding) == 128
    ref = engine.encode(MINILM, TEXTS[0], options={"dimensions": 128})["dense"]
    np.testing.assert_allclose(short.data[0].embedding, ref, atol=1e-6)

    # base64 on the wire (the openai client asks for it and decodes it when numpy is present)
    raw = client.embeddings.with_raw_response.create(model=MINILM, input=["x"], encoding_format="base64")
    b64 = json.loads(raw.http_response.text)["data"][0]["embedding"]
    np.testing.assert_allclose(
        np.frombuffer(base64.b64decode(b64), dtype="<f4"), engine.encode(MINILM, "x")["dense"], atol=1e-6
    )


@pytest.mark.compat
def test_openai_errors_use_openai_envelope(server: LiveServer) -> None:
    import openai
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        client.embeddings.create(model="no/such-model", input="x")
    assert e.value.body["code"] == "MODEL_NOT_FOUND"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MINILM, input=[])


SIE_SCORE_SCRIPT = """
import json, sys
from sie_sdk import SIEClient
url, model, query, docs = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
result = SIEClient(url).score(model, {"id": "q", "text": query}, [{"id": f"d{i}", "text": d} for i, d in enumerate(docs)])
print(json.dumps({"query_id": result.get("query_id"), "scores": [dict(s) for s in result["scores"]]}))
"""


@pytest.mark.compat
def test_sie_sdk_score_matches_engine(tmp_path: Path) -> None:
    """SIEClient.score against a live server with a tiny cross-encoder card gives the engine's ranking."""
    import shoal
    from tests.tiny_models import make, write_card

    make("bert", "ForSequenceClassification", tmp_path / "ce", num_labels=1)
    card = {
        "id": "tiny/ce",
        "family": "bert",
        "pooling": "cls",
        "max_seq_len": 64,
        "source": {"path": str(tmp_path / "ce")},
    }
    card |= {"tasks": ["score"], "outputs": ["score"], "score": {"kind": "classifier"}}
    write_card(tmp_path / "cards", card | {"profiles": {"default": {"max_batch_tokens": 1024}}})
    query, docs = "where is paris", ["paris is in france", "a dog", "the cat sat on the mat", "london"]
    with shoal.Engine(model_dir=tmp_path / "cards") as engine:
        want = engine.score(
            "tiny/ce", {"id": "q", "text": query}, [{"id": f"d{i}", "text": d} for i, d in enumerate(docs)]
        )
    srv = LiveServer(env={"SHOAL_MODEL_DIR": str(tmp_path / "cards")}).wait_ready()
    try:
        out = subprocess.run(
            [str(sie_python()), "-c", SIE_SCORE_SCRIPT, srv.url, "tiny/ce", query, json.dumps(docs)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        srv.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["query_id"] == "q"
    assert [s["item_id"] for s in got["scores"]] == [s["item_id"] for s in want["scores"]]
    assert [s["rank"] for s in got["scores"]] == list(range(len(docs)))
    for g, w in zip(got["scores"], want["scores"], strict=True):
        assert abs(g["score"] - w["score"]) < 1e-6
