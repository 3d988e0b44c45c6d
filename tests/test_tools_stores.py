"""The search tool on a server opens only the stores and collections configured for it: a remote caller cannot
make `shoal serve` open any store it can reach (issue 17, the same rule as local model folders)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent_tools.config import ToolSettings
from agent_tools.tools.search import check_store
from tests.helpers import LiveServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("stores")
    return {
        "default": f"lancedb://{base / 'default'}",
        "extra": f"lancedb://{base / 'extra'}",
        "other": f"lancedb://{base / 'other'}",
    }


@pytest.fixture(scope="module")
def server(stores: dict[str, str]) -> Iterator[LiveServer]:
    args = ["--search-db", stores["extra"], "--search-collection", "notes"]
    srv = LiveServer(env={"SHOAL_TOOLS_DB": stores["default"]}, args=args).wait_ready()
    yield srv
    srv.stop()


def search(server: LiveServer, **args: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/tools/search", json={"query": "pump seals", **args}, timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        {"db": "other"},
        {"db": "lancedb:///etc"},
        {"db": "qdrant://127.0.0.1:6333"},
        {"collection": "secrets"},
        {"db": "extra-but-misspelled"},
    ],
)
def test_unconfigured_stores_and_collections_are_refused(
    server: LiveServer, stores: dict[str, str], args: dict
) -> None:
    args = {k: stores.get(v, v) for k, v in args.items()}
    r = search(server, **args)
    assert r.status_code == 403 and r.json()["detail"]["code"] == "FORBIDDEN", r.text
    assert stores["default"] not in r.text and stores["extra"] not in r.text  # names nothing of the server's
    assert not Path(stores["other"].removeprefix("lancedb://")).exists()  # nothing was opened


@pytest.mark.parametrize(("db", "collection"), [(None, None), ("extra", None), (None, "notes"), ("default", "chunks")])
def test_configured_stores_and_collections_pass_the_gate(
    server: LiveServer, stores: dict[str, str], db: str | None, collection: str | None
) -> None:
    args = {k: v for k, v in (("db", stores.get(db or "")), ("collection", collection)) if v}
    r = search(server, **args)
    assert r.status_code in (200, 404), r.text  # past the gate: empty stores have no such collection yet
    if r.status_code == 404:
        assert r.json()["detail"]["code"] == "COLLECTION_NOT_FOUND"


def test_in_process_tools_open_any_store() -> None:
    check_store(ToolSettings(), "lancedb:///anywhere", "any")  # the SDK and `shoal mcp`: the caller's own machine
