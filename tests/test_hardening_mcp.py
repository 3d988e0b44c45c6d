"""`shoal mcp` under the server policy `shoal serve` has (engine/http/policy.py): a model id that is a path
never reaches the server's filesystem on any transport, answered with the same redacted message as `shoal
serve`; and over HTTP it has the same connection layer (head deadline, connection cap). Real processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.hardening_support import connect
from tests.helpers import REPO, LiveServer, free_port, make_tiny_bert, stop_process, wait_listening
from tests.test_hardening_auth import MCP_HEADERS, rpc_result, session
from tests.test_hardening_connections import wait_closed

pytestmark = pytest.mark.slow
KEY = "mcp-policy-key-0123456789"
ENV = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "SHOAL_API_KEY": KEY}
TIGHT = {"SHOAL_MAX_CONNECTIONS": "8", "SHOAL_HEALTH_CONNECTIONS": "4", "SHOAL_HEAD_TIMEOUT_S": "2"}
TIGHT |= {"SHOAL_KEEP_ALIVE_S": "2"}
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real checkpoint outside any model root, and a folder that does not exist."""
    base = tmp_path_factory.mktemp("mcp-disk")
    return {"there": make_tiny_bert(base / "checkpoint", seed=1), "missing": base / "no-such-checkpoint"}


@pytest.fixture(scope="module")
def mcp_http() -> Iterator[tuple[str, int, subprocess.Popen[bytes]]]:
    port = free_port()
    cmd = [sys.executable, "-m", "shoal.cli", "mcp", "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(cmd, env={**os.environ, **ENV, **TIGHT}, cwd=REPO)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_listening(proc, f"http://127.0.0.1:{port}/healthz", "shoal mcp")
        yield url, port, proc
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def serve() -> Iterator[LiveServer]:
    srv = LiveServer(env={"SHOAL_API_KEY": KEY}).wait_ready()
    yield srv
    srv.stop()


def calls(disk: dict[str, Path]) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, the model id in them): each tool that takes a model, with each folder."""
    out = []
    for folder in (str(disk["there"]), str(disk["missing"]), str(disk["there"]) + "/."):
        out.append(("embed", {"texts": ["hello"], "model": folder}, folder))
        out.append(("rerank", {"query": "q", "documents": ["a", "b"], "model": folder}, folder))
        taxonomy = {"name": "t", "children": [{"name": "a"}, {"name": "b"}]}
        out.append(("classify_taxonomy", {"texts": ["hello"], "taxonomy": taxonomy, "model": folder}, folder))
    return out


def template(error: dict[str, Any], model: str) -> tuple[str, str]:
    """(code, message with the id however it is shown replaced by ID)."""
    message = str(error["message"]).replace(repr(model), "ID").replace("'<server path>'", "ID")
    return str(error["code"]), message


def over_serve(srv: LiveServer, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{srv.url}/v1/tools/{tool}", json=args, headers=AUTH, timeout=120)
    assert r.status_code == 404, r.text
    return dict(r.json()["detail"])


def over_mcp_http(url: str, headers: dict[str, str], tool: str, args: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": tool, "arguments": args}}
    r = httpx.post(url, json=body, headers={**MCP_HEADERS, **headers}, timeout=120)
    result = rpc_result(r)["result"]
    assert result["isError"], result
    return dict(result["structuredContent"]["error"])


def over_mcp_stdio(todo: list[tuple[str, dict[str, Any], str]]) -> list[dict[str, Any]]:
    from mcp import Client, StdioServerParameters

    async def main() -> list[dict[str, Any]]:
        args = ["-m", "shoal.cli", "mcp"]
        params = StdioServerParameters(command=sys.executable, args=args, env=ENV, cwd=str(REPO))
        out = []
        async with Client(params, read_timeout_seconds=300) as client:
            for tool, arguments, _ in todo:
                r = await client.call_tool(tool, arguments)
                assert r.is_error
                out.append(dict(r.structured_content["error"]))
        return out

    return asyncio.run(main())


def test_no_transport_lets_a_model_id_reach_the_filesystem(
    disk: dict[str, Path], serve: LiveServer, mcp_http: tuple[str, int, subprocess.Popen[bytes]]
) -> None:
    """`shoal serve`'s tool route, MCP over HTTP and MCP over stdio: one answer whatever is on disk, the
    same on each transport, and no folder named in it."""
    url, _, proc = mcp_http
    headers = session(url, AUTH)
    todo = calls(disk)
    answers = {
        "serve": [over_serve(serve, tool, args) for tool, args, _ in todo],
        "mcp http": [over_mcp_http(url, headers, tool, args) for tool, args, _ in todo],
        "mcp stdio": over_mcp_stdio(todo),
    }
    expected = {template(e, model) for e, (_, _, model) in zip(answers["serve"], todo, strict=True)}
    assert len(expected) == 1, expected  # an existing and a missing folder read alike
    code, message = expected.pop()
    assert code == "MODEL_NOT_FOUND" and message.startswith("no model ID: this server serves"), message
    for transport, got in answers.items():
        for error, (tool, _, model) in zip(got, todo, strict=True):
            assert template(error, model) == (code, message), (transport, tool, error)
            assert str(disk["there"].parent) not in str(error), (transport, error)
    assert proc.poll() is None and serve.alive()
    assert httpx.get(f"{serve.url}/healthz").status_code == 200


def test_mcp_over_http_closes_slow_heads_at_the_deadline(mcp_http: tuple[str, int, subprocess.Popen[bytes]]) -> None:
    """Slowloris: heads trickled a byte at a time (fewer than the cap) are answered 408 at the head deadline."""
    _, port, proc = mcp_http
    socks = []
    for _ in range(6):
        s = connect(port)
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    started = time.monotonic()
    try:
        for _ in range(10):  # a byte each half second: trickling does not extend the deadline
            for s in socks:
                with contextlib.suppress(OSError):  # closed already
                    s.sendall(b"X")
            time.sleep(0.5)
            if time.monotonic() - started > 4:
                break
        results = [wait_closed(s, 6) for s in socks]
    finally:
        for s in socks:
            s.close()
    for took, got in results:
        assert took is not None, "a trickled head stayed open past its deadline"
        assert got.startswith(b"HTTP/1.1 408") and b'"REQUEST_TIMEOUT"' in got, got[:200]
    assert time.monotonic() - started < 2 + 5  # the head deadline (2 s) and slack, not the 60 s and more before
    assert proc.poll() is None and httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200


def test_mcp_over_http_caps_idle_connections(mcp_http: tuple[str, int, subprocess.Popen[bytes]]) -> None:
    """40 idle connections against a cap of 8 (and 4 kept for probes): the rest are closed, a probe answers."""
    _, port, proc = mcp_http
    socks = [connect(port) for _ in range(40)]
    try:
        time.sleep(0.5)
        r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert r.status_code == 200
        still_open = sum(wait_closed(s, 0.2)[0] is None for s in socks)
        assert still_open <= 8 + 4, still_open
    finally:
        for s in socks:
            s.close()
    assert proc.poll() is None
