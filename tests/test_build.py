"""The server and the worker are built by engine.build from settings alone; `shoal serve` parses its options into
settings and calls the same function."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from engine.build import build_app, build_worker
from engine.config import EngineSettings
from engine.runtime import AsyncEngine
from shoal.commands.serving import tools_routes


def test_build_app_serves_the_native_routes_and_the_routers_given(tiny_bert: Path) -> None:
    settings = EngineSettings(offline=True, auto_tune=False)
    app = build_app(settings, [tools_routes({}, None, None, None, None)])
    engine = app.state.engine
    assert isinstance(engine, AsyncEngine) and engine.settings is settings
    with TestClient(app) as client:
        assert client.get("/readyz").status_code == 200
        r = client.post(f"/v1/encode/{tiny_bert}", json={"items": [{"text": "hello"}]})
        assert r.status_code == 200 and len(r.json()["items"][0]["dense"]["values"]) > 0
        tools = client.get("/v1/tools")
        assert tools.status_code == 200 and tools.json()["tools"], tools.text
    assert not engine.ready  # drained with the app


def test_build_worker_needs_a_queue_and_is_a_pull_worker() -> None:
    with pytest.raises(ValueError, match="queue URL"):
        build_worker(EngineSettings())
    worker = build_worker(EngineSettings(queue_url="nats://127.0.0.1:4222"))
    assert isinstance(worker, AsyncEngine) and worker.worker is None  # not started: nothing connected yet


def test_serve_builds_its_app_with_build_app(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`shoal serve` turns its options into settings and hands build_app's app to the server, unchanged."""
    from engine import build
    from engine.http import server
    from shoal.cli import app as cli

    built: list[FastAPI] = []
    served: list[tuple[FastAPI, EngineSettings]] = []
    real = build.build_app

    def spy(settings: EngineSettings, routers: object = ()) -> FastAPI:
        built.append(real(settings, routers))  # type: ignore[arg-type]
        return built[-1]

    monkeypatch.setattr(build, "build_app", spy)
    monkeypatch.setattr(server, "serve_app", lambda app, settings, log_level: served.append((app, settings)))
    from tests.helpers import free_port

    port = free_port()
    r = CliRunner().invoke(cli, ["serve", "--port", str(port), "--threads", "1", "--max-batch-tokens", "512"])
    assert r.exit_code == 0, r.output
    assert len(built) == 1 and served[0][0] is built[0]
    settings = served[0][1]
    assert (settings.port, settings.threads, settings.max_batch_tokens) == (port, 1, 512)
    assert built[0].state.engine.settings is settings
    with TestClient(built[0]) as client:  # the tool routes serve is given are mounted on that app
        assert client.get("/v1/tools").status_code == 200
