"""The separate metrics port opens with the same keys as /metrics on the API port: the metrics key when one is
set, else the API keys; open only when neither is configured. The real WSGI server on a loopback port."""

from __future__ import annotations

import httpx
import pytest

from engine.config import EngineSettings
from engine.http.server import start_metrics_server
from tests.helpers import free_port

API_KEY, METRICS_KEY = "api-key-0123456789", "metrics-key-0123456789"


def scrape(settings: EngineSettings, token: str | None) -> httpx.Response:
    server = start_metrics_server(settings)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"http://127.0.0.1:{settings.metrics_port}/metrics", headers=headers, timeout=30)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("keys", "token", "status"),
    [
        ({"api_key": API_KEY}, None, 401),  # API keys alone: the port is not left open
        ({"api_key": API_KEY}, "wrong-key-0123456789", 401),
        ({"api_key": API_KEY}, API_KEY, 200),
        ({"api_key": API_KEY, "metrics_key": METRICS_KEY}, API_KEY, 401),  # a metrics key is the only key then
        ({"api_key": API_KEY, "metrics_key": METRICS_KEY}, METRICS_KEY, 200),
        ({"metrics_key": METRICS_KEY}, None, 401),
        ({}, None, 200),  # nothing configured: open, as the API is
    ],
    ids=["api-none", "api-wrong", "api-good", "both-api", "both-metrics", "metrics-none", "open"],
)
def test_the_metrics_port_takes_the_keys_that_open_metrics(
    keys: dict[str, str], token: str | None, status: int
) -> None:
    settings = EngineSettings(host="127.0.0.1", metrics_port=free_port(), **keys)
    r = scrape(settings, token)
    assert r.status_code == status, r.text[:200]
    if status == 401:
        assert r.json()["detail"]["code"] == "UNAUTHORIZED" and r.headers["www-authenticate"] == "Bearer"
        assert "metrics key" in r.json()["detail"]["message"]
    else:
        assert "# HELP" in r.text
