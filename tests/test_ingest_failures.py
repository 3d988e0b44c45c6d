"""Bad documents never stop a run: each is reported with its reason, everything else is ingested; the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pymupdf
import pytest
from typer.testing import CliRunner

import shoal
from connectors import open_store
from pipeline import ingest
from pipeline.config import PipelineConfig
from pipeline.manifest import Manifest
from shoal.cli import app
from tests.corpus import write_doc

GOOD = "The ferry timetable changes on the first Sunday of October every year."


def make_bad_folder(root: Path) -> dict[str, str]:
    """Good documents plus one of each kind of bad file; returns {bad file: expected reason}."""
    write_doc(root / "good.md", "markdown", "Good", [("Ferry", [GOOD])])
    write_doc(root / "good.pdf", "pdf", "Good PDF", [("Pumps", ["Pumps are checked every spring by the crew."])])
    good_pdf = (root / "good.pdf").read_bytes()
    (root / "corrupted.pdf").write_bytes(good_pdf[:300] + b"\x00garbage" * 50)
    enc = pymupdf.open()
    enc.new_page().insert_text((72, 72), "classified")
    (root / "encrypted.pdf").write_bytes(enc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="u", owner_pw="o"))
    (root / "empty.md").write_bytes(b"")
    (root / "binary.txt").write_bytes(bytes(range(256)) * 40)
    with open(root / "huge.txt", "wb") as f:
        line = b"a line of text that repeats to make a fifty megabyte file\n"
        for _ in range(50 * 2**20 // len(line) + 1):
            f.write(line)
    (root / "latin1.txt").write_bytes("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e".encode("latin-1"))
    return {
        "corrupted.pdf": "damaged PDF",
        "encrypted.pdf": "encrypted PDF",
        "empty.md": "empty file",
        "binary.txt": "binary content",
        "huge.txt": "file too large",
        "latin1.txt": "invalid UTF-8",
    }


@pytest.mark.slow
def test_bad_files_are_reported_and_the_rest_ingested(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    expected = make_bad_folder(root)
    cfg = PipelineConfig(db=f"lancedb://{tmp_path / 'db'}")
    with shoal.Engine() as engine:
        s = ingest(root, cfg, client=engine)
        assert s.files_seen == 8 and s.files_processed == 2
        reasons = {f.path: f.reason for f in s.files_failed}
        assert set(reasons) == set(expected)
        for name, why in expected.items():
            assert why in reasons[name], (name, reasons[name])
        assert "50.0 MiB" in reasons["huge.txt"]
        assert s.exit_code == 3 and not s.ok
        sources = {r["source"] for r in open_store(cfg.db).rows(cfg.collection, ["source"])}
        assert sources == {"good.md", "good.pdf"}
        manifest = Manifest(tmp_path / "db" / "manifest.sqlite")
        recs = {r.rel: r for r in manifest.sources(cfg.collection).values()}
        manifest.close()
        assert {k for k, r in recs.items() if r.status == "failed"} == set(expected)
        assert all(expected[k] in recs[k].error for k in expected)
        # a fixed file is picked up on the next run; the others are reported again
        (root / "empty.md").write_text("# Now\n\nThe file has text now.\n")
        again = ingest(root, cfg, client=engine)
        assert again.files_processed == 1 and len(again.files_failed) == 5 and again.files_unchanged == 2


@pytest.mark.slow
def test_cli_ingest_search_reindex(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_doc(root / "good.md", "markdown", "Good", [("Ferry", [GOOD]), ("Other", ["Bicycles are free on Mondays."])])
    (root / "empty.txt").write_bytes(b"")
    db = f"lancedb://{tmp_path / 'db'}"
    runner = CliRunner()
    r = runner.invoke(app, ["ingest", str(root), "--db", db, "--json", "-q"])
    assert r.exit_code == 3, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["files_processed"] == 1 and summary["files_failed"][0]["path"] == "empty.txt"

    r = runner.invoke(app, ["search", "when does the ferry timetable change", "--db", db, "--json", "-k", "2"])
    assert r.exit_code == 0, r.output
    hits = [json.loads(line) for line in r.stdout.strip().splitlines()]
    assert GOOD in hits[0]["text"] and hits[0]["source"] == "good.md" and len(hits) == 2

    r = runner.invoke(app, ["search", "ferry", "--db", db, "--filter", "array_has(heading_path, 'Other')", "--json"])
    assert r.exit_code == 0 and all("Other" in json.loads(x)["heading_path"] for x in r.stdout.strip().splitlines())

    r = runner.invoke(app, ["search", "ferry", "--db", db])  # the human-readable table
    assert r.exit_code == 0 and "good.md" in r.stdout and "Ferry" in r.stdout

    r = runner.invoke(app, ["search", "ferry", "--db", db, "--rerank", "sentence-transformers/all-MiniLM-L6-v2"])
    assert r.exit_code == 1 and "cannot rerank" in r.output

    (root / "empty.txt").unlink()
    r = runner.invoke(app, ["reindex", "--db", db, "--json", "-q"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["files_unchanged"] == 1 and summary["files_failed"] == [] and summary["chunks_embedded"] == 0

    bad = tmp_path / "bad.yaml"
    bad.write_text("chunking: {target_tokens: 10}\n")
    r = runner.invoke(app, ["ingest", str(root), "--db", db, "--config", str(bad)])
    assert r.exit_code == 1 and "INVALID_CONFIG" in r.output
