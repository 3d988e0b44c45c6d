"""The SDK clients (sync and async, over HTTP) agree with the in-process Engine; the CLI works end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import shoal
from engine.errors import InvalidInput, ModelNotFound, PayloadTooLarge
from tests.conftest import MINILM
from tests.helpers import REPO, LiveServer

TEXTS = ["the sdk and the server agree", "second item"]


def test_sync_client_matches_engine(server: LiveServer, engine: shoal.Engine) -> None:
    with shoal.Client(server.url) as client:
        got = client.encode(MINILM, TEXTS)
        one = client.encode(MINILM, {"id": "q", "text": TEXTS[0]}, is_query=True, output_dtype="float16")
        assert MINILM in [m["name"] for m in client.models()]
    want = engine.encode(MINILM, TEXTS)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g["dense"], w["dense"], atol=1e-6)
    assert one["id"] == "q" and one["dense"].dtype == np.float16


async def test_async_client_json_mode_and_typed_errors(server: LiveServer, engine: shoal.Engine) -> None:
    async with shoal.AsyncClient(server.url, use_json=True) as client:
        got = await client.encode(MINILM, TEXTS[1])
        np.testing.assert_allclose(got["dense"], engine.encode(MINILM, TEXTS[1])["dense"], atol=1e-6)
        with pytest.raises(ModelNotFound):
            await client.encode("nobody/nothing", "x")
        with pytest.raises(InvalidInput, match="items must not be empty"):
            await client.encode(MINILM, [])
        # over the server's item cap (64): split into requests of 64 (read from GET /info), results in order
        many = await client.encode(MINILM, [{"id": str(i), "text": f"x {i}"} for i in range(100)])
        assert [r["id"] for r in many] == [str(i) for i in range(100)]
        with pytest.raises(PayloadTooLarge):  # over the body limit (2 MiB) is still refused
            await client.encode(MINILM, ["y" * (3 * 1024 * 1024)])


def test_engine_errors_are_typed(engine: shoal.Engine) -> None:
    with pytest.raises(ModelNotFound):
        engine.encode("nobody/nothing", "x")
    with pytest.raises(InvalidInput, match="truncation is off"):
        engine.encode(MINILM, "word " * 400, options={"truncate": False})
    assert engine.encode(MINILM, "after errors")["dense"].shape == (384,)


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "shoal.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, input=stdin, cwd=REPO, timeout=300, check=False)


@pytest.mark.slow
def test_cli_encode_in_process_and_over_http(server: LiveServer, engine: shoal.Engine) -> None:
    local = run_cli("encode", "hello there", "--dimensions", "32")
    assert local.returncode == 0, local.stderr
    line = json.loads(local.stdout.strip().splitlines()[0])
    assert line["dims"] == 32 and line["text"] == "hello there"
    want = engine.encode(MINILM, "hello there", options={"dimensions": 32})["dense"]
    np.testing.assert_allclose(line["dense"], want, atol=1e-6)
    remote = run_cli("encode", "--url", server.url, stdin="from stdin\nsecond line\n")
    assert remote.returncode == 0, remote.stderr
    assert [json.loads(x)["text"] for x in remote.stdout.strip().splitlines()] == ["from stdin", "second line"]
    bad = run_cli("encode", "x", "--model", "nobody/nothing")
    assert bad.returncode == 1 and bad.stderr.startswith("MODEL_NOT_FOUND: ") and bad.stdout == ""


def test_cli_models_and_help() -> None:
    out = run_cli("models", "--json")
    assert out.returncode == 0 and MINILM in [m["name"] for m in json.loads(out.stdout)]
    for cmd in ("serve", "encode", "models"):
        h = run_cli(cmd, "--help")
        assert h.returncode == 0 and "Usage" in h.stdout
