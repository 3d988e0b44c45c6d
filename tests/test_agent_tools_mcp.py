"""`shoal mcp` over stdio and over streamable HTTP, driven by the official `mcp` client SDK: list the tools,
call classify_taxonomy and filter_context, and check results and errors."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest

import agent_tools
from tests.agent_tools_support import PRODUCTS
from tests.helpers import REPO, free_port, stop_process, wait_listening

ENV = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
SERVE = [sys.executable, "-m", "shoal.cli", "mcp", "--taxonomy", f"products={PRODUCTS}"]


async def exercise(client: Any) -> None:
    """The same session on either transport."""
    from mcp import MCPError

    listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == list(agent_tools.TOOLS)
    for t in listed:
        assert t.input_schema == agent_tools.TOOLS[t.name].parameters() and t.description
    texts = ["noise cancelling over-ear headphones", "size 4 nappies, 120 pack", "please reset my password"]
    r = await client.call_tool("classify_taxonomy", {"texts": texts, "taxonomy": "products"})
    assert not r.is_error
    labels = [x["label"] for x in r.structured_content["results"]]
    # the transport's job; what the scorer answers an out-of-scope text is tested in-process
    # (tests/test_agent_tools_taxonomy_scorer.py)
    assert labels[:2] == ["Electronics > Audio > Headphones", "Baby > Nappies & changing > Nappies"]
    assert len(labels) == 3
    assert r.content[0].type == "text" and "Headphones" in r.content[0].text
    passages = ["Riders must be at least 16 years old.", "Bikes are serviced monthly.", "E-bikes cost more."]
    r = await client.call_tool("filter_context", {"query": "How old do riders have to be?", "passages": passages})
    assert not r.is_error
    out = r.structured_content
    assert [p["index"] for p in out["passages"]] == [0] and out["tokens_after"] < out["tokens_before"]
    r = await client.call_tool("classify_taxonomy", {"texts": [], "taxonomy": "products"})
    assert r.is_error and r.content[0].text.startswith("INVALID_INPUT: classify_taxonomy: invalid arguments: texts")
    r = await client.call_tool("filter_context", {"query": "q", "text": "word " * (1024 * 1024)})
    assert r.is_error and r.structured_content["error"]["code"] == "PAYLOAD_TOO_LARGE"
    with pytest.raises(MCPError, match="no tool named 'nope'"):
        await client.call_tool("nope", {})


@pytest.mark.slow
def test_mcp_over_stdio() -> None:
    from mcp import Client, StdioServerParameters

    async def main() -> None:
        params = StdioServerParameters(command=SERVE[0], args=SERVE[1:], env=ENV, cwd=str(REPO))
        async with Client(params, read_timeout_seconds=300) as client:
            await exercise(client)

    asyncio.run(main())


@pytest.mark.slow
def test_mcp_over_streamable_http() -> None:
    from mcp import Client

    port = free_port()
    cmd = [*SERVE, "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(cmd, env={**os.environ, **ENV}, cwd=REPO)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_listening(proc, url, "shoal mcp")

        async def main() -> None:
            async with Client(url, read_timeout_seconds=300) as client:
                await exercise(client)

        asyncio.run(main())
        assert proc.poll() is None  # errors did not take the server down
    finally:
        stop_process(proc)
