"""Shared fixtures: tiny checkpoints, the real MiniLM folder, an in-process engine, a live server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# tests pin their precision: the background precision tune of a first load runs only where a test turns it on
os.environ.setdefault("SHOAL_AUTO_TUNE", "0")
# ...and read no tuned profile a `shoal serve` on this machine stored (~/.cache/shoal/profiles.json): a bfloat16
# profile there would change the vectors tests compare at float32 tolerances
if "SHOAL_PROFILE_STORE" not in os.environ:
    import tempfile

    os.environ["SHOAL_PROFILE_STORE"] = str(Path(tempfile.mkdtemp(prefix="shoal-profiles-")) / "profiles.json")

from tests.helpers import LiveServer, make_tiny_bert, minilm_dir  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
pytest_plugins = ["tests.extract_support"]  # the tiny GLiNER fixtures


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    return minilm_dir()


@pytest.fixture(scope="session")
def engine() -> Iterator[object]:
    import shoal

    with shoal.Engine() as e:
        yield e


@pytest.fixture(scope="session")
def server(tiny_bert: Path) -> Iterator[LiveServer]:
    """A live `shoal serve` with small limits so the limit errors are cheap to provoke."""
    env = {"SHOAL_MAX_ITEMS": "64", "SHOAL_MAX_BODY_BYTES": str(2 * 1024 * 1024)}
    srv = LiveServer(env=env).wait_ready()
    yield srv
    srv.stop()
