"""The ingest root itself: a symlink loop or a path that is not UTF-8 is refused through the SDK before the store
is opened; a run that aborts is recorded as failed, never as ok; a recorded root that turned into a symlink
loop does not stop a reindex of the others. (The CLI's one-line refusals: tests/test_cli_errors.py.)"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from pipeline.config import ConfigError, PipelineConfig


def loop(at: Path) -> Path:
    """`at` -> `at`-b -> `at`: a root hidden by a symlink loop."""
    os.symlink(at.name + "-b", at)
    os.symlink(at.name, at.with_name(at.name + "-b"))
    return at


def latin1_folder(parent: Path) -> Path:
    """A folder named `caf\\xe9` (Latin-1 bytes, not UTF-8) holding one Markdown file."""
    path = Path(os.fsdecode(bytes(parent) + b"/caf\xe9"))
    path.mkdir()
    (path / "note.md").write_text("# Note\n\nA note in a folder whose name is Latin-1.\n")
    return path


@pytest.mark.parametrize(("kind", "says"), [("symlink loop", "symlink loop"), ("not UTF-8", r"caf\\xe9")])
def test_a_bad_root_is_refused_before_the_store_is_opened(tmp_path: Path, kind: str, says: str) -> None:
    from pipeline import ingest

    root = loop(tmp_path / "a") if kind == "symlink loop" else latin1_folder(tmp_path)
    db = tmp_path / "db"
    with pytest.raises(ConfigError, match=says) as e:
        ingest(root, PipelineConfig(db=f"lancedb://{db}"), client=object())  # the client is never used
    assert e.value.code == "INVALID_PATH"
    assert not db.exists(), "nothing is created for a root that cannot be ingested"


class Unplugged:
    """A progress listener that fails the run once the walk is done, as a crash in the middle would."""

    def start(self, root: str, files: int) -> None:
        raise RuntimeError("the disk went away")

    def file_done(self, rel: str, status: str, chunks: int, tokens: int) -> None:
        pass

    def phase(self, name: str) -> None:
        pass


def run_statuses(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db / "manifest.sqlite") as con:
        return [(Path(r[0]).name, r[1]) for r in con.execute("SELECT root, status FROM runs ORDER BY id")]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_aborted_run_is_recorded_failed_and_a_looped_root_does_not_stop_a_reindex(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import shoal
    from pipeline import ingest
    from shoal.cli import app

    one, two = tmp_path / "one", tmp_path / "two"
    for root, text in ((one, "The ferry leaves at noon."), (two, "The tide turns at six.")):
        root.mkdir()
        (root / "note.md").write_text(f"# Note\n\n{text}\n")
    db = tmp_path / "db"
    cfg = PipelineConfig(db=f"lancedb://{db}")
    with shoal.Engine() as engine:
        with pytest.raises(RuntimeError, match="the disk went away"):
            ingest(one, cfg, client=engine, progress=Unplugged())
        assert run_statuses(db) == [("one", "failed")], "an aborted run is never recorded as ok"
        assert ingest(one, cfg, client=engine).files_processed == 1
        assert ingest(two, cfg, client=engine).files_processed == 1
    assert run_statuses(db) == [("one", "failed"), ("one", "ok"), ("two", "ok")]

    two.rename(tmp_path / "two-moved")
    loop(two)  # a recorded root now hidden by a symlink loop
    r = CliRunner().invoke(app, ["reindex", "--db", f"lancedb://{db}", "--json", "-q"])
    assert r.exit_code == 3 and isinstance(r.exception, SystemExit), (r.exception, r.output)
    assert "INVALID_PATH" in r.output and "symlink loop" in r.output and "Traceback" not in r.output
    summaries = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert [(Path(s["root"]).name, s["files_unchanged"]) for s in summaries] == [("one", 1)]
    assert run_statuses(db)[-1] == ("one", "ok")
