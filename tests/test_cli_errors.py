"""Every expected CLI error is one or two lines on stderr with its documented exit code (0 ok, 1 usage or
config, 2 unreachable, 3 some files failed); --debug shows the traceback; read-only commands create nothing.

The unreachable server is a loopback port nothing listens on (taken from the OS, then closed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_support import assert_short_error, shoal
from tests.helpers import REPO, free_port


@pytest.fixture(scope="module")
def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_encode_with_unreachable_url_is_exit_2(tmp_path: Path, dead_url: str) -> None:
    r = shoal("encode", "hello", "--url", dead_url, cwd=tmp_path)
    lines = assert_short_error(r, "UNREACHABLE", 2)
    assert dead_url in lines[0] and "shoal serve" in lines[1]


@pytest.mark.slow
def test_ingest_with_unreachable_url_is_exit_2(tmp_path: Path, dead_url: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nSome text.\n")
    r = shoal("ingest", "docs", "--url", dead_url, "--db", str(tmp_path / "db"), cwd=tmp_path)
    assert_short_error(r, "UNREACHABLE", 2)


@pytest.mark.slow
def test_debug_shows_the_traceback(tmp_path: Path, dead_url: str) -> None:
    r = shoal("encode", "hello", "--url", dead_url, "--debug", cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" in r.stderr and "Unreachable" in r.stderr
    r = shoal("encode", "hello", "--url", dead_url, cwd=tmp_path, env={"SHOAL_DEBUG": "1"})
    assert "Traceback" in r.stderr


@pytest.mark.slow
def test_usage_errors_exit_1(tmp_path: Path) -> None:
    r = shoal("search", cwd=tmp_path)  # missing QUERY
    assert r.returncode == 1 and "Missing argument" in r.stderr and "Traceback" not in r.stderr
    r = shoal("nosuchcommand", cwd=tmp_path)
    assert r.returncode == 1 and "No such command" in r.stderr
    r = shoal("delete", cwd=tmp_path)  # neither --source nor --collection
    assert r.returncode == 1 and "--collection" in r.stderr


@pytest.mark.slow
def test_unknown_model_is_one_line(tmp_path: Path) -> None:
    r = shoal("encode", "x", "--model", "nobody/nothing", cwd=tmp_path)
    assert_short_error(r, "MODEL_NOT_FOUND", 1)


@pytest.mark.slow
def test_serve_preload_without_weights_is_short(tmp_path: Path) -> None:
    r = shoal("serve", "--port", str(free_port()), "--preload", "naver/splade-v3", cwd=tmp_path)
    lines = assert_short_error(r, "MODEL_UNAVAILABLE", 1)
    assert "naver/splade-v3" in lines[0] and "HF cache" in lines[0] and "shoal models" in lines[1]


SDK_MISSING_WEIGHTS = """
import shoal
with shoal.Engine() as engine:
    engine.encode("naver/splade-v3", "x", output_types=["sparse"])
"""


@pytest.mark.slow
def test_sdk_model_without_weights_is_a_short_error(tmp_path: Path) -> None:
    """An uncaught error in a script: the caller's frames and a one-line message, not the engine's insides."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-c", SDK_MISSING_WEIGHTS], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) <= 12, r.stderr
    assert lines[-1].startswith("engine.errors.") and "naver/splade-v3" in lines[-1], lines[-1]
    assert "residency" not in r.stderr and "worker" not in r.stderr, "engine internals left in the traceback"


def test_missing_path_exits_1_and_records_nothing(tmp_path: Path) -> None:
    r = shoal("ingest", "nope", cwd=tmp_path)
    assert_short_error(r, "PATH_NOT_FOUND", 1)
    assert list(tmp_path.iterdir()) == [], "no store and no manifest were created"


def test_unusable_roots_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    assert_short_error(shoal("ingest", "loop1", cwd=tmp_path), "INVALID_PATH", 1)
    bad = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(bad)
    r = shoal("ingest", os.fsdecode(bad), cwd=tmp_path)
    lines = assert_short_error(r, "INVALID_PATH", 1)
    assert "\\xe9" in lines[0] and "UTF-8" in lines[0]
    assert not (tmp_path / "shoal-data").exists()


@pytest.mark.parametrize(
    "args",
    [["search", "anything"], ["reindex"], ["collections"], ["sources"], ["forget", "docs", "--yes"]],
    ids=["search", "reindex", "collections", "sources", "forget"],
)
def test_read_only_commands_create_no_store(tmp_path: Path, args: list[str]) -> None:
    r = shoal(*args, cwd=tmp_path)
    assert_short_error(r, "NO_STORE", 1)
    assert list(tmp_path.iterdir()) == [], "nothing was created"


@pytest.mark.slow
def test_search_in_a_store_with_no_manifest_creates_none(tmp_path: Path) -> None:
    (tmp_path / "shoal-data").mkdir()
    r = shoal("search", "anything", cwd=tmp_path)
    assert_short_error(r, "NO_COLLECTION", 1)
    r = shoal("reindex", cwd=tmp_path)
    assert_short_error(r, "NOTHING_RECORDED", 1)
    assert list((tmp_path / "shoal-data").iterdir()) == []


def test_version_and_bad_config(tmp_path: Path) -> None:
    r = shoal("--version", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "shoal 0.1.0"
    (tmp_path / "docs").mkdir()
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(
        "steps:\n  - {kind: dense, model: m}\n  - {kind: nonsense, model: m}\nchunking: {target_tokens: 8}\n"
    )
    r = shoal("ingest", "docs", "--config", str(cfg), cwd=tmp_path)
    lines = assert_short_error(r, "INVALID_CONFIG", 1)
    assert "steps.1.kind" in lines[0] and "target_tokens" in lines[0]


@pytest.mark.parametrize("dtype", ["binary", "ubinary"])
@pytest.mark.slow
def test_encode_binary_reports_the_model_dimension(tmp_path: Path, dtype: str) -> None:
    r = shoal("encode", "one text", "--dtype", dtype, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    assert line["dims"] == 384 and len(line["dense"]) == 48, "384 dims travel as 48 packed bytes"


def test_encode_offers_exactly_the_engine_dtypes() -> None:
    """The CLI checks --dtype before loading anything, against its own copy of the engine's list."""
    from typing import get_args

    from engine.tasks.task import OUTPUT_DTYPES
    from shoal.commands.encode import Dtype

    assert get_args(Dtype) == OUTPUT_DTYPES


@pytest.mark.slow
def test_status_of_a_server(tmp_path: Path, server: object, dead_url: str) -> None:
    url = server.url  # type: ignore[attr-defined]
    r = shoal("status", "--url", url, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"shoal 0.1.0 at {url}: ready (embedded") and "queue      in-process" in r.stdout
    assert "device " in r.stdout and "models     " in r.stdout
    s = json.loads(shoal("status", "--url", url, "--json", cwd=tmp_path).stdout)
    assert s["status"] == "ready" and {m["name"] for m in s["models"]} >= {"sentence-transformers/all-MiniLM-L6-v2"}
    assert_short_error(shoal("status", "--url", dead_url, cwd=tmp_path), "UNREACHABLE", 2)


@pytest.mark.parametrize(
    "args, env, code, says",
    [
        (["--device-budget", "lots"], {}, "INVALID_SETTING", "device_budget"),
        ([], {"SHOAL_API_KEY": ""}, "INVALID_CONFIG", "SHOAL_API_KEY is set but empty"),
        (["--api-keys-file", "/nonexistent/keys"], {}, "INVALID_CONFIG", "cannot read the API keys file"),
    ],
    ids=["bad-setting", "empty-key", "missing-keys-file"],
)
@pytest.mark.slow
def test_serve_refuses_a_bad_configuration_in_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str], code: str, says: str
) -> None:
    """A configuration error (exit 1), before any model loads; the gateway never starts open."""
    r = shoal("serve", "--port", str(free_port()), *args, cwd=tmp_path, env=env)
    lines = assert_short_error(r, code, 1)
    assert says in lines[0] and lines[1].strip().startswith("see docs/")
