"""Store and source management from the command line: collections, sources (with failures), forget and
delete (asked first, --yes to skip), ingest of one file and with --include/--exclude, and the errors of
search against an ingested store (bad filters, an unreachable --url)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from connectors.registry import open_store
from pipeline import ingest
from shoal.cli import app
from tests.cli_support import assert_short_error, shoal
from tests.helpers import free_port

DOCS = {
    "pump.md": "# Pump\n\nError E-417 means the impeller is blocked. Stop the pump and clear it.\n",
    "lease.md": "# Lease\n\nEither party may end the lease with three months' written notice.\n",
    "notes/ferry.txt": "The ferry timetable changes on the first Monday of April.\n",
    "empty.txt": "",
}


def write_docs(root: Path) -> Path:
    for name, text in DOCS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, engine: Any) -> tuple[Path, Path]:
    """(docs folder, store folder): the folder ingested once with the shared in-process engine."""
    base = tmp_path_factory.mktemp("store-cmds")
    docs = write_docs(base / "docs")
    summary = ingest(docs, db=f"lancedb://{base / 'db'}", client=engine)
    assert summary.files_processed == 3 and len(summary.files_failed) == 1  # empty.txt
    return docs, base / "db"


@pytest.fixture
def store(built: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the ingested store, for tests that remove things."""
    docs, db = built
    shutil.copytree(db, tmp_path / "db")
    return docs, tmp_path / "db"


@pytest.mark.slow
def test_collections_and_sources(built: tuple[Path, Path], tmp_path: Path) -> None:
    docs, db = built
    r = shoal("collections", "--db", str(db), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (coll,) = json.loads(r.stdout)
    assert coll["name"] == "chunks" and coll["chunks"] == 3 and coll["sources"] == {"failed": 1, "ok": 3}
    assert coll["roots"][0]["root"] == str(docs.resolve()) and coll["roots"][0]["status"] == "partial"
    r = shoal("sources", "--db", str(db), "--json", cwd=tmp_path)
    rows = {s["source"]: s for s in json.loads(r.stdout)}
    assert set(rows) == set(DOCS) and rows["notes/ferry.txt"]["chunks"] == 1
    assert rows["empty.txt"]["status"] == "failed" and "empty" in rows["empty.txt"]["error"]
    assert rows["pump.md"]["updated_at"] > 0 and rows["pump.md"]["path"] == str(docs.resolve() / "pump.md")
    table = shoal("sources", "--db", str(db), cwd=tmp_path).stdout  # piped: fits 80 columns, names whole
    title, *body = table.splitlines()  # the title names the store's path whole, however long the temp folder is
    assert title.startswith("sources of collection chunks in ") and all(len(line) <= 80 for line in body), table
    assert "notes/ferry.txt" in table and "4 sources, 3 chunks, 1 failed" in table
    assert "chunks" in shoal("collections", "--db", str(db), cwd=tmp_path).stdout


@pytest.mark.slow
def test_delete_a_source_asks_first(store: tuple[Path, Path], tmp_path: Path) -> None:
    _, db = store
    r = shoal("delete", "--source", "pump.md", "--db", str(db), cwd=tmp_path, stdin="n\n")
    assert r.returncode == 1 and "delete 1 chunk of pump.md" in r.stderr and "nothing removed" in r.stderr
    assert r.stdout == "", "the question goes to stderr: stdout is the command's output alone"
    r = shoal("delete", "--source", "pump.md", "--db", str(db), cwd=tmp_path)  # no answer at all: refused
    assert r.stdout == "", "no question is printed where no one can answer it"
    assert_short_error(r, "NOT_CONFIRMED", 1)
    assert open_store(str(db)).count("chunks") == 3
    r = shoal("delete", "--source", "pump.md", "--db", str(db), cwd=tmp_path, stdin="y\n")
    assert r.returncode == 0 and "deleted 1 chunk of pump.md" in r.stdout
    store_ = open_store(str(db))
    assert store_.count("chunks") == 2 and "pump.md" not in {s.source for s in store_.sources("chunks")}
    r = shoal("delete", "--source", "pump.md", "--db", str(db), "--yes", cwd=tmp_path)
    assert_short_error(r, "NOT_FOUND", 1)


@pytest.mark.slow
def test_delete_a_collection(store: tuple[Path, Path], tmp_path: Path) -> None:
    _, db = store
    r = shoal("delete", "--collection", "chunks", "--db", str(db), "--yes", cwd=tmp_path)
    assert r.returncode == 0 and "dropped collection chunks" in r.stdout
    assert open_store(str(db)).list_collections() == []
    r = shoal("reindex", "--db", str(db), cwd=tmp_path)
    assert_short_error(r, "NOTHING_RECORDED", 1)


@pytest.mark.slow
def test_forget_a_folder(store: tuple[Path, Path], tmp_path: Path) -> None:
    docs, db = store
    r = shoal("forget", str(tmp_path / "elsewhere"), "--db", str(db), "--yes", cwd=tmp_path)
    lines = assert_short_error(r, "NOT_FOUND", 1)
    assert str(docs.resolve()) in lines[0], "the error lists the recorded roots"
    r = shoal("forget", str(docs), "--db", str(db), "--keep-chunks", cwd=tmp_path, stdin="y\n")
    assert r.returncode == 0 and "0 chunks removed" in r.stdout
    assert open_store(str(db)).count("chunks") == 3
    assert_short_error(shoal("reindex", "--db", str(db), cwd=tmp_path), "NOTHING_RECORDED", 1)


@pytest.mark.slow
def test_forget_a_folder_that_is_gone_removes_its_chunks(store: tuple[Path, Path], tmp_path: Path) -> None:
    docs, db = store
    moved = tmp_path / "moved"
    shutil.copytree(docs, moved)  # the module's folder stays for other tests; forget works on the path alone
    r = shoal("forget", str(docs), "--db", str(db), "--yes", cwd=tmp_path)
    assert r.returncode == 0 and "3 chunks removed" in r.stdout
    assert open_store(str(db)).count("chunks") == 0


@pytest.mark.slow
def test_search_errors_against_a_store(built: tuple[Path, Path], tmp_path: Path) -> None:
    _, db = built
    dead = f"http://127.0.0.1:{free_port()}"
    assert_short_error(shoal("search", "pump", "--db", str(db), "--url", dead, cwd=tmp_path), "UNREACHABLE", 2)
    r = shoal("search", "pump", "--db", str(db), "--where", "pages>=many", cwd=tmp_path)
    assert_short_error(r, "INVALID_FILTER", 1)
    r = shoal("search", "pump", "--db", str(db), "--filter", "source = ", cwd=tmp_path)
    assert_short_error(r, "INVALID_FILTER", 1)
    r = shoal("search", "pump", "--db", str(db), "--collection", "other", cwd=tmp_path)
    assert_short_error(r, "NO_COLLECTION", 1)


def test_search_output_says_hit_or_hits(built: tuple[Path, Path]) -> None:
    _, db = built
    runner = CliRunner()
    r = runner.invoke(app, ["search", "impeller blocked", "--db", str(db), "-k", "1"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("1 hit for 'impeller blocked'") and "pump.md" in r.output
    r = runner.invoke(app, ["search", "impeller", "--db", str(db), "-k", "2"])
    assert r.output.startswith("2 hits for")


def test_ingest_one_file_and_include_exclude(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs")
    db = tmp_path / "db"
    runner = CliRunner()
    r = runner.invoke(app, ["ingest", str(docs / "pump.md"), "--db", str(db), "--json", "-q"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout.strip().splitlines()[-1])
    assert s["files_seen"] == 1 and s["files_processed"] == 1 and s["root"] == str(docs.resolve() / "pump.md")
    r = runner.invoke(app, ["reindex", "--db", str(db), "--json", "-q"])  # the one-file root reindexes
    assert r.exit_code == 0 and json.loads(r.stdout.strip().splitlines()[-1])["files_unchanged"] == 1
    coll = "picked"
    args = ["ingest", str(docs), "--db", str(db), "-c", coll, "--include", "**/*.md", "--exclude", "lease.md"]
    r = runner.invoke(app, [*args, "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert {s.source for s in open_store(str(db)).sources(coll)} == {"pump.md"}


def test_ingest_summary_title_names_the_collection(tmp_path: Path) -> None:
    docs = write_docs(tmp_path / "docs")
    (docs / "empty.txt").unlink()
    r = CliRunner().invoke(app, ["ingest", str(docs / "lease.md"), "--db", str(tmp_path / "db"), "-c", "leases"])
    assert r.exit_code == 0, r.output
    assert "collection leases" in " ".join(r.stdout.split()), r.stdout


def test_search_routes_for_the_console(built: tuple[Path, Path], engine: Any) -> None:
    """GET/POST /v1/search as `shoal serve --db` mounts them (the console's Search page)."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from pipeline.http import search_router

    _, db = built
    app = FastAPI()
    app.include_router(search_router(engine, str(db)))
    with TestClient(app) as c:
        described = {"db": str(db), "collection": "chunks", "collections": ["chunks"], "location": f"lancedb://{db}"}
        assert c.get("/v1/search").json() == described
        r = c.post("/v1/search", json={"query": "impeller blocked", "top_k": 2})
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        assert len(hits) == 2 and hits[0]["source"] == "pump.md" and "E-417" in hits[0]["text"]
        assert c.post("/v1/search", json={"query": ""}).json()["detail"]["code"] == "INVALID_INPUT"
        other = c.post("/v1/search", json={"query": "x", "location": "lancedb:///elsewhere"})
        assert other.status_code == 409 and other.json()["detail"]["code"] == "STORE_MISMATCH", other.text
        same = c.post("/v1/search", json={"query": "impeller", "top_k": 1, "location": f"lancedb://{db}"})
        assert same.status_code == 200 and len(same.json()["hits"]) == 1, same.text
        typo = c.post("/v1/search", json={"query": "x", "top_kk": 2}).json()["detail"]
        assert "top_kk: unknown key (did you mean 'top_k'?)" in typo["message"], typo
        r = c.post("/v1/search", json={"query": "x", "collection": "nope"})
        assert r.status_code == 404 and r.json()["detail"]["code"] == "NO_COLLECTION"
        r = c.post("/v1/search", json={"query": "x", "where": ["colour=red"]})
        assert r.status_code == 400 and r.json()["detail"]["code"] == "UNKNOWN_FIELD"
    gone = FastAPI()
    gone.include_router(search_router(engine, str(db) + "-missing"))
    with TestClient(gone) as c:
        assert c.get("/v1/search").json()["collections"] == []
    assert not Path(str(db) + "-missing").exists(), "listing a missing store does not create it"
