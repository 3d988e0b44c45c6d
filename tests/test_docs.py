"""docs/ ships the reference pages the README points at, and docs/configuration.md lists every setting of
the engine, the ingest pipeline and the agent tools (a new setting without a line there fails here)."""

from __future__ import annotations

from pydantic import BaseModel

from agent_tools.config import ToolSettings
from engine.config import EngineSettings
from pipeline.config import ChunkConfig, EngineConfig, PipelineConfig, SourceConfig, Step
from tests.helpers import REPO

DOCS = REPO / "docs"


def test_reference_pages_exist() -> None:
    for name in ("http-api.md", "configuration.md", "architecture.md", "deployment.md", "troubleshooting.md"):
        assert (DOCS / name).is_file(), name
    assert "## Missing weights" in (DOCS / "troubleshooting.md").read_text()


def test_configuration_lists_every_setting() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [f"SHOAL_{n.upper()}" for n in EngineSettings.model_fields if f"`SHOAL_{n.upper()}`" not in text]
    missing += [
        f"SHOAL_TOOLS_{n.upper()}" for n in ToolSettings.model_fields if f"`SHOAL_TOOLS_{n.upper()}`" not in text
    ]
    nested: list[tuple[type[BaseModel], str]] = [
        (PipelineConfig, ""), (SourceConfig, "source."), (ChunkConfig, "chunking."), (Step, "steps[]."),
        (EngineConfig, "engine."),
    ]  # fmt: skip
    for cls, prefix in nested:
        for name in cls.model_fields:
            if name in ("source", "chunking", "steps", "engine"):
                continue  # sections: their keys are listed one by one
            if f"`{prefix}{name}`" not in text:
                missing.append(prefix + name)
    assert not missing, f"settings missing from docs/configuration.md: {missing}"


def test_http_reference_names_every_route() -> None:
    """Each route of the app (and the ones `shoal serve` mounts) is in http-api.md, or compatibility.md for the
    routes other clients' SDKs call."""
    from agent_tools.http import tools_router
    from engine.http.app import create_app
    from engine.runtime import AsyncEngine
    from pipeline.http import search_router

    engine = AsyncEngine()
    app = create_app(engine)
    app.include_router(tools_router(engine))
    app.include_router(search_router(engine, "lancedb://./nowhere"))
    text = (DOCS / "http-api.md").read_text() + (DOCS / "compatibility.md").read_text()
    paths = {getattr(r, "path", "") for r in app.routes} - {"/openapi.json", "/docs/assets/{name}", "/console"}
    paths = {p.replace("{model:path}", "{model}").replace("{name:path}", "{name}") for p in paths}
    missing = sorted(p for p in paths if p and p not in text)
    assert not missing, f"routes missing from docs/http-api.md: {missing}"


def test_http_reference_explains_every_error_code() -> None:
    """Every error code the engine can answer with has a row in the error table, with its HTTP status."""
    import engine.errors

    table = [line for line in (DOCS / "http-api.md").read_text().splitlines() if line.startswith("| `")]
    missing = []
    for cls in vars(engine.errors).values():
        if isinstance(cls, type) and issubclass(cls, engine.errors.ShoalError) and cls is not engine.errors.ShoalError:
            if cls.code == "UNREACHABLE":
                continue  # the SDK's own, never an HTTP answer (the page says so below the table)
            if not any(f"`{cls.code}`" in line and f"| {cls.status}" in line for line in table):
                missing.append(f"{cls.code} {cls.status}")
    assert not missing, f"error codes missing from the table in docs/http-api.md: {missing}"
