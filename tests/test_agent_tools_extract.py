"""The extract_entities agent tool: listed and called over HTTP (`/v1/tools`), over MCP (stdio), and as a
Python function, with a tiny random GLiNER; results match the SDK's extract."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import agent_tools
from agent_tools.config import ToolSettings
from agent_tools.http import tools_router
from engine.http.app import create_app
from engine.runtime import AsyncEngine
from tests.extract_support import LABELS, texts
from tests.helpers import REPO

ENV = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    engine = AsyncEngine()
    app = create_app(engine)
    app.include_router(tools_router(engine, ToolSettings()))
    with TestClient(app) as c:
        yield c


def sdk_entities(engine: Any, model: str, items: list[str]) -> list[list[dict[str, Any]]]:
    return [r["entities"] for r in engine.extract(model, items, labels=LABELS)]


def test_extract_entities_over_http(client: TestClient, gliner_dirs: dict[str, Path], engine: Any) -> None:
    model = str(gliner_dirs["span"])
    listed = {t["function"]["name"]: t for t in client.get("/v1/tools").json()["tools"]}
    assert listed["extract_entities"] == agent_tools.TOOLS["extract_entities"].openai()
    assert set(listed["extract_entities"]["function"]["parameters"]["required"]) == {"texts", "labels"}
    items = texts(3, seed=12)
    r = client.post("/v1/tools/extract_entities", json={"texts": items, "labels": LABELS, "model": model})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model"] == model and [x["index"] for x in out["results"]] == [0, 1, 2]
    assert [x["entities"] for x in out["results"]] == sdk_entities(engine, model, items)
    assert any(x["entities"] for x in out["results"])
    assert out["model_calls"]["extract_requests"] == 1 and out["model_calls"]["extract_items"] == 3
    strict = client.post(
        "/v1/tools/extract_entities", json={"texts": items, "labels": LABELS, "model": model, "threshold": 0.7}
    ).json()
    assert all(e["score"] >= 0.7 for x in strict["results"] for e in x["entities"])
    for bad, status, code in [
        ({"texts": items, "labels": []}, 400, "INVALID_INPUT"),
        ({"texts": items, "labels": ["a", "a"], "model": model}, 400, "INVALID_INPUT"),
        ({"texts": items, "labels": ["a"], "model": "nobody/nothing"}, 404, "MODEL_NOT_FOUND"),
    ]:
        r = client.post("/v1/tools/extract_entities", json=bad)
        assert r.status_code == status and r.json()["detail"]["code"] == code, r.text


def test_extract_entities_as_a_python_function(gliner_dirs: dict[str, Path], engine: Any) -> None:
    model = str(gliner_dirs["span"])
    items = texts(2, seed=13)
    r = agent_tools.extract_entities(texts=items, labels=LABELS, model=model, client=engine)
    assert [x["entities"] for x in r["results"]] == sdk_entities(engine, model, items)


@pytest.mark.slow
def test_extract_entities_over_mcp(gliner_dirs: dict[str, Path], engine: Any) -> None:
    from mcp import Client, StdioServerParameters

    model = str(gliner_dirs["span"])
    items = texts(2, seed=14)
    want = sdk_entities(engine, model, items)

    async def main() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "shoal.cli", "mcp", "--local-models"], env=ENV, cwd=str(REPO)
        )
        async with Client(params, read_timeout_seconds=300) as mcp:
            listed = {t.name: t for t in (await mcp.list_tools()).tools}
            assert listed["extract_entities"].input_schema == agent_tools.TOOLS["extract_entities"].parameters()
            r = await mcp.call_tool("extract_entities", {"texts": items, "labels": LABELS, "model": model})
            assert not r.is_error, r.content
            assert [x["entities"] for x in r.structured_content["results"]] == want
            bad = await mcp.call_tool("extract_entities", {"texts": items, "labels": []})
            assert bad.is_error and bad.content[0].text.startswith("INVALID_INPUT: extract_entities")

    asyncio.run(main())
