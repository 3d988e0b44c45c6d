"""The tools over HTTP (`GET /v1/tools`, `POST /v1/tools/{name}` on the engine's app), their JSON Schemas, the
search tool over a real ingested LanceDB collection, and the agent-loop example against a live `shoal serve`.

The agent loop needs a chat model that calls tools; none can run here, so a scripted OpenAI-compatible chat
endpoint stands in for it (a mock, for that reason only). It checks what the openai client really sent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

import agent_tools
from agent_tools.config import ToolSettings
from agent_tools.http import tools_router
from engine.http.app import create_app
from engine.runtime import AsyncEngine
from tests.agent_tools_support import PRODUCTS
from tests.helpers import REPO, LiveServer, free_port

GOOD = {
    "classify_taxonomy": {"texts": ["noise cancelling over-ear headphones"], "taxonomy": "products"},
    "filter_context": {
        "query": "how old must riders be?",
        "passages": ["Riders must be 16 or older.", "Bikes are blue."],
    },
    "rerank": {"query": "capital of France", "documents": ["Bananas are yellow.", "Paris is the capital of France."]},
    "search": {"query": "pump maintenance", "top_k": 2},
    "embed": {"texts": ["hello world"], "dimensions": 64},
    "extract_entities": {"texts": ["Ann works at Acme in Paris."], "labels": ["person", "organisation", "city"]},
}
BAD = {  # each violates the tool's JSON Schema
    "classify_taxonomy": [
        {"taxonomy": "products"},
        {"texts": [], "taxonomy": "products"},
        {"texts": ["a"], "taxonomy": 3},
    ],
    "filter_context": [
        {"passages": ["a"]},
        {"query": "q", "passages": "a"},
        {"query": "q", "passages": [], "margin": -1},
    ],
    "rerank": [
        {"query": "q"},
        {"query": "q", "documents": ["d"], "top_n": 0},
        {"query": "q", "documents": ["d"], "x": 1},
    ],
    "search": [{}, {"query": "q", "top_k": 1000}, {"query": "q", "mode": "fuzzy"}],
    "embed": [{"texts": "one"}, {"texts": [""]}, {"texts": ["a"], "is_query": "maybe"}],
    "extract_entities": [
        {"texts": ["a"]},
        {"texts": ["a"], "labels": []},
        {"texts": ["a"], "labels": ["x"], "threshold": 2},
    ],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, engine: Any) -> str:
    """examples/docs ingested with MiniLM into a LanceDB store in a temporary folder."""
    import pipeline

    folder = tmp_path_factory.mktemp("store")
    db = f"lancedb://{folder / 'data'}"
    summary = pipeline.ingest(REPO / "examples" / "docs", db=db, client=engine)
    assert summary.chunks_written > 0
    return db


@pytest.fixture(scope="module")
def client(store: str) -> Iterator[TestClient]:
    engine = AsyncEngine()
    app = create_app(engine)
    app.include_router(tools_router(engine, ToolSettings(taxonomies={"products": PRODUCTS}, db=store)))
    with TestClient(app) as c:
        yield c


def test_every_schema_is_valid_json_schema_and_matches_validation(client: TestClient) -> None:
    listed = client.get("/v1/tools").json()["tools"]
    assert [t["function"]["name"] for t in listed] == list(agent_tools.TOOLS) == list(GOOD)
    assert listed == agent_tools.openai_tools()
    for entry in listed:
        assert entry["type"] == "function" and set(entry["function"]) == {"name", "description", "parameters"}
        fn = entry["function"]
        assert fn["description"] and len(fn["name"]) <= 64
        schema = fn["parameters"]
        jsonschema.Draft202012Validator.check_schema(schema)
        assert (
            schema["type"] == "object" and schema["additionalProperties"] is False and "$ref" not in json.dumps(schema)
        )
        validator = jsonschema.Draft202012Validator(schema)
        assert not list(validator.iter_errors(GOOD[fn["name"]]))
        for bad in BAD[fn["name"]]:
            assert list(validator.iter_errors(bad)), (fn["name"], bad)  # the schema rejects it ...
            r = client.post(f"/v1/tools/{fn['name']}", json=bad)  # ... and so does the endpoint, clearly
            assert r.status_code == 400, (fn["name"], bad, r.text)
            detail = r.json()["detail"]
            assert detail["code"] == "INVALID_INPUT" and detail["message"].startswith(f"{fn['name']}: ")


@pytest.mark.slow
def test_calls_over_http(client: TestClient) -> None:
    r = client.post("/v1/tools/classify_taxonomy", json=GOOD["classify_taxonomy"]).json()
    assert r["results"][0]["label"] == "Electronics > Audio > Headphones"
    r = client.post("/v1/tools/filter_context", json=GOOD["filter_context"]).json()
    assert [p["index"] for p in r["passages"]] == [0] and r["tokens_after"] < r["tokens_before"]
    r = client.post("/v1/tools/rerank", json=GOOD["rerank"]).json()
    assert [x["index"] for x in r["results"]] == [1, 0] and r["scorer"].startswith("embedding:")
    r = client.post("/v1/tools/embed", json=GOOD["embed"]).json()
    assert r["dims"] == 64 and len(r["embeddings"][0]) == 64
    r = client.post("/v1/tools/filter_context", json={"query": "q", "passages": []})
    assert r.status_code == 200 and r.json()["kept"] == 0


def test_search_tool_over_an_ingested_collection(client: TestClient, store: str) -> None:
    r = client.post("/v1/tools/search", json={"query": "what is error code E-417 on the pump?", "top_k": 3})
    assert r.status_code == 200, r.text
    hits = r.json()["results"]
    assert len(hits) == 3 and hits[0]["text"] and "source" in hits[0] and "vector" not in hits[0]
    assert any("pump" in h["source"] for h in hits)
    same = agent_tools.search(query="what is error code E-417 on the pump?", top_k=3, db=store)
    assert [h["id"] for h in same["results"]] == [h["id"] for h in hits]  # the plain function agrees
    missing = client.post("/v1/tools/search", json={"query": "q", "collection": "nope"})
    assert missing.status_code == 404 and missing.json()["detail"]["code"] == "COLLECTION_NOT_FOUND"
    assert "no collection 'nope'" in missing.json()["detail"]["message"]
    other = client.post("/v1/tools/search", json={"query": "q", "db": "nosuchdb://x"})
    assert other.status_code == 400 and other.json()["detail"]["code"] == "STORE_ERROR"


def test_errors_are_clear_and_the_server_stays_up(client: TestClient) -> None:
    r = client.post("/v1/tools/nope", json={})
    assert r.status_code == 404 and r.json()["detail"]["code"] == "TOOL_NOT_FOUND"
    r = client.post("/v1/tools/embed", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["detail"]["message"]
    r = client.post("/v1/tools/embed", json=["a list"])
    assert r.status_code == 400 and "must be a JSON object" in r.json()["detail"]["message"]
    five_mb = {"query": "q", "text": "word " * (1024 * 1024)}
    r = client.post("/v1/tools/filter_context", json=five_mb)
    assert r.status_code == 413 and r.json()["detail"]["code"] == "PAYLOAD_TOO_LARGE"
    r = client.post(
        "/v1/tools/classify_taxonomy",
        json={"texts": ["a"], "taxonomy": {"nodes": [{"id": "a", "name": "A", "parent": "a"}]}},
    )
    assert r.status_code == 400 and "cyclic" in r.json()["detail"]["message"]
    assert client.get("/healthz").status_code == 200


class ScriptedChat:
    """An OpenAI-compatible /chat/completions that plays a fixed script and records what it was sent."""

    def __init__(self) -> None:
        from fastapi import FastAPI

        self.requests: list[dict[str, Any]] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.complete)
        self.port = free_port()

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(body)
        turn = len(self.requests)
        if turn == 1:  # first a call with a bad argument, to see the error come back
            message = self.call(
                "classify_taxonomy",
                {"texts": ["dreadnought guitar, solid spruce top"], "taxonomy": "products", "rerank_top": 0},
            )
        elif turn == 2:
            message = self.call(
                "classify_taxonomy", {"texts": ["dreadnought guitar, solid spruce top"], "taxonomy": "products"}
            )
        else:
            result = json.loads(body["messages"][-1]["content"])
            message = {"role": "assistant", "content": f"It goes under {result['results'][0]['label']}."}
        finish = "tool_calls" if "tool_calls" in message else "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        return {
            "id": f"c{turn}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [choice],
        }

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        tool_call = {
            "id": f"call{len(self.requests)}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [tool_call]}


@pytest.mark.slow
def test_agent_loop_example_with_openai_tool_schemas(tmp_path: Path) -> None:
    import sys

    import uvicorn

    sys.path.insert(0, str(REPO / "examples"))
    from agent_loop import run_agent

    chat = ScriptedChat()
    server = uvicorn.Server(uvicorn.Config(chat.app, host="127.0.0.1", port=chat.port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    shoal = LiveServer(args=["--taxonomy", f"products={PRODUCTS}"]).wait_ready()
    try:
        answer, messages = run_agent(
            "Where does a dreadnought guitar with a spruce top go?",
            llm_url=f"http://127.0.0.1:{chat.port}/v1",
            llm_model="scripted",
            shoal_url=shoal.url,
        )
    finally:
        shoal.stop()
        server.should_exit = True
        thread.join(timeout=10)
    assert answer == "It goes under Musical instruments > Guitars > Acoustic."
    first = chat.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == list(agent_tools.TOOLS)
    for t in first["tools"]:
        jsonschema.Draft202012Validator.check_schema(t["function"]["parameters"])
    error = json.loads(chat.requests[1]["messages"][-1]["content"])  # the bad call's answer reached the model
    assert error["detail"]["code"] == "INVALID_INPUT" and "rerank_top" in error["detail"]["message"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
