"""Every surface that serves data refuses a request without a valid key when keys are configured: the API
(a key in the URL under any common name too), MCP over HTTP, and /metrics on its own port; and MCP's search
opens only the configured stores. Against real `shoal serve` and `shoal mcp --transport http` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.hardening_support import MINILM
from tests.helpers import REPO, LiveServer, free_port, stop_process, wait_listening

pytestmark = pytest.mark.slow
KEY, METRICS_KEY = "api-key-0123456789", "metrics-key-0123456789"
ENV = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# -- the API port -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[LiveServer, int]]:
    port = free_port()
    env = {"SHOAL_API_KEY": KEY, "SHOAL_METRICS_KEY": METRICS_KEY, "SHOAL_METRICS_PORT": str(port)}
    srv = LiveServer(env=env).wait_ready()
    yield srv, port
    srv.stop()


@pytest.mark.parametrize("name", ["x-api-key", "X-Api-Key", "x_api_key", "api_token", "api_key", "token"])
def test_a_key_in_the_url_is_refused_under_any_common_name(gateway: tuple[LiveServer, int], name: str) -> None:
    srv, _ = gateway
    r = httpx.post(
        f"{srv.url}/v1/encode/{MINILM}?{name}={KEY}", json={"items": [{"text": "x"}]}, headers=bearer(KEY), timeout=60
    )
    assert r.status_code == 401 and "URL" in r.json()["detail"]["message"], r.text


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), (bearer("wrong-key-0123456789"), 401), (bearer(KEY), 401), (bearer(METRICS_KEY), 200)],
)
def test_the_metrics_port_needs_the_metrics_key(
    gateway: tuple[LiveServer, int], headers: dict[str, str], status: int
) -> None:
    _, port = gateway
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=headers, timeout=30)
    assert r.status_code == status, r.text[:200]
    if status == 401:
        assert r.json()["detail"]["code"] == "UNAUTHORIZED" and r.headers["www-authenticate"] == "Bearer"
    else:
        assert "shoal_requests_total" in r.text


# -- MCP over HTTP ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    store = tmp_path_factory.mktemp("mcp-store")
    cmd = [sys.executable, "-m", "shoal.cli", "mcp", "--transport", "http", "--port", str(port)]
    cmd += ["--db", f"lancedb://{store}"]
    proc = subprocess.Popen(cmd, env={**os.environ, **ENV, "SHOAL_API_KEY": KEY}, cwd=REPO)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_listening(proc, url, "shoal mcp")
        yield url
    finally:
        stop_process(proc)


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def rpc_result(r: httpx.Response) -> Any:
    """The JSON-RPC message of a reply sent as JSON or as one server-sent event."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return r.json()


def session(url: str, headers: dict[str, str]) -> dict[str, str]:
    r = httpx.post(url, json=INIT, headers={**MCP_HEADERS, **headers}, timeout=60)
    assert r.status_code == 200, r.text
    sid = {"mcp-session-id": r.headers["mcp-session-id"]} if "mcp-session-id" in r.headers else {}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    httpx.post(url, json=note, headers={**MCP_HEADERS, **headers, **sid}, timeout=60)
    return {**headers, **sid}


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("initialize", INIT["params"]),
        ("tools/list", {}),
        ("tools/call", {"name": "search", "arguments": {"query": "q", "db": "lancedb:///any/path"}}),
    ],
)
@pytest.mark.parametrize(
    ("what", "headers", "query"),
    [("no key", {}, ""), ("a wrong key", bearer("wrong-key-0123456789"), ""), ("a key in the URL", {}, f"?key={KEY}")],
)
def test_mcp_over_http_refuses_without_a_valid_key(
    mcp: str, method: str, params: dict[str, Any], what: str, headers: dict[str, str], query: str
) -> None:
    body = {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}
    r = httpx.post(mcp + query, json=body, headers={**MCP_HEADERS, **headers}, timeout=60)
    assert r.status_code == 401, (what, r.status_code, r.text[:200])
    assert r.json()["detail"]["code"] == "UNAUTHORIZED"


def test_mcp_over_http_with_the_key_serves_and_search_opens_only_its_stores(mcp: str) -> None:
    headers = session(mcp, bearer(KEY))
    listed = httpx.post(
        mcp, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers={**MCP_HEADERS, **headers}
    )
    assert "search" in [t["name"] for t in rpc_result(listed)["result"]["tools"]]
    call = {"name": "search", "arguments": {"query": "q", "db": "lancedb:///any/path"}}
    r = httpx.post(
        mcp,
        json={"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call},
        headers={**MCP_HEADERS, **headers},
        timeout=120,
    )
    result = rpc_result(r)["result"]
    assert result["isError"] and result["structuredContent"]["error"]["code"] == "FORBIDDEN", result
    assert "lancedb://" in result["content"][0]["text"]  # the store it was asked for, its local path scrubbed
