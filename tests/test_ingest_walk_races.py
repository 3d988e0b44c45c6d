"""The walk and the read never follow a path they did not check and never block; bad entries never abort a run."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from pipeline.config import SourceConfig
from pipeline.sources import SourceError, read_source, walk

DEPTH = 2000  # 2,000 nested folders: a path of ~4,000 characters, past PATH_MAX and the recursion limit
SECRET = "outside the root: the private key text"
DIR = os.O_RDONLY | os.O_DIRECTORY


def make_deep(root: Path, depth: int, text: str) -> str:
    """depth nested folders `d/d/...` with deep.md at the bottom, made fd by fd (the path is too long to name)."""
    fd = os.open(root, DIR)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", DIR, dir_fd=fd)
        os.close(fd)
        fd = child
    out = os.open("deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(out, text.encode())
    os.close(out)
    os.close(fd)
    return "/".join(["d"] * depth + ["deep.md"])


def remove_deep(root: Path, depth: int) -> None:
    """Undo make_deep bottom-up through '..' (shutil.rmtree recurses and would fail at this depth)."""
    fd = os.open(root, DIR)
    for _ in range(depth):
        child = os.open("d", DIR, dir_fd=fd)
        os.close(fd)
        fd = child
    os.unlink("deep.md", dir_fd=fd)
    for _ in range(depth):
        up = os.open("..", DIR, dir_fd=fd)
        os.close(fd)
        fd = up
        os.rmdir("d", dir_fd=fd)
    os.close(fd)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    (d / "sub").mkdir(parents=True)
    (d / "secret.md").write_text(SECRET)
    (d / "sub" / "inner.md").write_text(SECRET)
    return d


@pytest.mark.slow
def test_2000_nested_folders_are_walked_and_read(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "top.md").write_text("top")
    rel = make_deep(root, DEPTH, "at the bottom of the well")
    try:
        w = walk(root, SourceConfig())
        assert w.complete, w.errors
        assert [f.rel for f in w.files] == [rel, "top.md"]
        deep = w.files[0]
        assert deep.problem is None and len(deep.real) == DEPTH + 1
        assert read_source(deep, 1) == b"at the bottom of the well"
    finally:
        remove_deep(root, DEPTH)


def test_symlink_loops_bad_names_and_fifos_are_reported_entries(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "good.md").write_text("good")
    os.symlink("b.md", root / "a.md")  # a.md -> b.md -> a.md
    os.symlink("a.md", root / "b.md")
    os.symlink("loop2", root / "loop1")  # a loop whose names the include globs do not pick: refused
    os.symlink("loop1", root / "loop2")
    os.symlink("missing.md", root / "dangling.md")
    (root / "sub").mkdir()
    (root / "sub" / "x.md").write_text("x")
    os.symlink("..", root / "sub" / "up")  # a folder loop inside the root: visited once, listed as skipped
    os.mkfifo(root / "pipe.md")
    fd = os.open(bytes(root) + b"/caf\xe9.md", os.O_WRONLY | os.O_CREAT, 0o644)  # a Latin-1 name
    os.write(fd, b"name not utf-8")
    os.close(fd)
    os.mkdir(bytes(root) + b"/dossier-\xe9t\xe9")  # a folder with such a name
    os.close(os.open(bytes(root) + b"/photo-\xe9.png", os.O_WRONLY | os.O_CREAT, 0o644))  # not picked: no entry

    w = walk(root, SourceConfig())
    assert w.complete, w.errors
    problems = {f.rel: f.problem for f in w.files}
    assert problems["good.md"] is None and problems["sub/x.md"] is None
    assert "symlink loop" in problems["a.md"] and "symlink loop" in problems["b.md"]
    assert "broken symlink" in problems["dangling.md"]
    assert "not a regular file (a FIFO)" in problems["pipe.md"]
    assert "file name is not valid UTF-8" in problems["caf\\xe9.md"]
    assert "folder name is not valid UTF-8" in problems["dossier-\\xe9t\\xe9"]
    assert {r for r, _ in w.skipped} == {"loop1", "loop2", "sub/up"}
    assert len(problems) == 8, problems
    json.dumps([str(f.path) for f in w.files] + [f.rel for f in w.files])  # every recorded name is valid text
    for f in w.files:
        if f.problem:
            with pytest.raises(SourceError, match=f.problem[:12]):
                read_source(f, 1)
        else:
            assert read_source(f, 1)


def test_file_swapped_for_an_outside_symlink_after_the_walk_is_not_read(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("a")
    (root / "sub" / "inner.md").write_text("inner")
    files = {f.rel: f for f in walk(root, SourceConfig()).files}
    (root / "a.md").unlink()
    os.symlink(outside / "secret.md", root / "a.md")
    (root / "sub").rename(root / "old-sub")
    os.symlink(outside / "sub", root / "sub")  # a folder on the path swapped too
    with pytest.raises(SourceError, match="replaced by a symlink after the walk"):
        read_source(files["a.md"], 1)
    with pytest.raises(SourceError, match="folder on its path was replaced"):
        read_source(files["sub/inner.md"], 1)


def test_symlink_inside_the_root_is_read_by_its_checked_real_path(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "real.md").write_text("real")
    os.symlink("docs/real.md", root / "alias.md")
    files = {f.rel: f for f in walk(root, SourceConfig()).files}
    assert files["alias.md"].real == ("docs", "real.md")
    assert read_source(files["alias.md"], 1) == b"real"
    (root / "docs" / "real.md").unlink()  # the target swapped for an outside link: the alias is not followed
    os.symlink(outside / "secret.md", root / "docs" / "real.md")
    with pytest.raises(SourceError, match="symlink"):
        read_source(files["alias.md"], 1)


@pytest.mark.timeout(30)
def test_file_swapped_for_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.md").write_text("a")
    (f,) = walk(root, SourceConfig()).files
    (root / "a.md").unlink()
    os.mkfifo(root / "a.md")  # no writer: a plain open() would wait forever
    with pytest.raises(SourceError, match="not a regular file \\(a FIFO"):
        read_source(f, 1)


def test_file_that_grew_past_the_limit_after_the_walk_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.md").write_text("small")
    (f,) = walk(root, SourceConfig()).files
    (root / "a.md").write_bytes(b"x" * (2 * 2**20))
    with pytest.raises(SourceError, match="file too large: 2.0 MiB, over the 1 MiB limit"):
        read_source(f, 1)


class SwapAfterWalk:
    """A progress listener that, once the walk is done, swaps files under the run's feet."""

    def __init__(self, root: Path, outside: Path) -> None:
        self.root, self.outside, self.done = root, outside, {}

    def start(self, root: str, files: int) -> None:
        (self.root / "swap-link.md").unlink()
        os.symlink(self.outside / "secret.md", self.root / "swap-link.md")
        (self.root / "swap-fifo.md").unlink()
        os.mkfifo(self.root / "swap-fifo.md")

    def file_done(self, rel: str, status: str, chunks: int, tokens: int) -> None:
        self.done[rel] = status

    def phase(self, name: str) -> None:
        pass


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bad_entries_and_races_fail_alone_in_a_complete_run(tmp_path: Path, outside: Path) -> None:
    import shoal
    from connectors import open_store
    from pipeline import PipelineConfig, ingest

    root = tmp_path / "root"
    root.mkdir()
    (root / "good.md").write_text("# Ferries\n\nThe ferry leaves at noon from the east pier.\n")
    for name in ("swap-link.md", "swap-fifo.md"):
        (root / name).write_text("# Innocent\n\nThis text was checked by the walk.\n")
    os.symlink("b.md", root / "a.md")
    os.symlink("a.md", root / "b.md")
    fd = os.open(bytes(root) + b"/caf\xe9.md", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"a Latin-1 file name")
    os.close(fd)
    deep = make_deep(root, DEPTH, "# Well\n\nThe deepest note of the folder tree.\n")
    db = tmp_path / "db"
    cfg = PipelineConfig(db=f"lancedb://{db}")
    try:
        with shoal.Engine() as engine:
            listener = SwapAfterWalk(root, outside)
            s = ingest(root, cfg, client=engine, progress=listener)
            assert s.walk_complete and s.files_seen == 7
            assert s.files_processed == 2 and s.exit_code == 3
            reasons = {f.path: f.reason for f in s.files_failed}
            assert set(reasons) == {"a.md", "b.md", "caf\\xe9.md", "swap-link.md", "swap-fifo.md"}
            assert "symlink loop" in reasons["a.md"] and "not valid UTF-8" in reasons["caf\\xe9.md"]
            assert "replaced by a symlink" in reasons["swap-link.md"]
            assert "FIFO" in reasons["swap-fifo.md"]
            rows = open_store(cfg.db).rows(cfg.collection, ["source", "text"])
            assert {r["source"] for r in rows} == {"good.md", deep}
            assert not any(SECRET in r["text"] for r in rows), "the outside file was read"
            again = ingest(root, cfg, client=engine)  # a re-run: nothing aborts it either
            assert again.files_unchanged == 2 and len(again.files_failed) == 4
            assert [f.path for f in again.files_refused] == ["swap-link.md"]  # now an outside link: refused
        with sqlite3.connect(db / "manifest.sqlite") as con:
            statuses = [r[0] for r in con.execute("SELECT status FROM runs ORDER BY id")]
            failed = {r[0]: r[1] for r in con.execute("SELECT rel, status FROM sources")}
        assert statuses == ["partial", "partial"], "a run with failed entries is never recorded as ok"
        assert failed["a.md"] == "failed" and failed["swap-fifo.md"] == "failed" and failed[deep] == "ok"
    finally:
        remove_deep(root, DEPTH)


@pytest.mark.slow
def test_cli_reports_bad_entries_without_a_traceback(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from shoal.cli import app

    root = tmp_path / "root"
    root.mkdir()
    (root / "good.md").write_text("# Tides\n\nHigh tide is at six in the morning.\n")
    os.symlink("b.md", root / "a.md")
    os.symlink("a.md", root / "b.md")
    os.close(os.open(bytes(root) + b"/caf\xe9.md", os.O_WRONLY | os.O_CREAT, 0o644))
    r = CliRunner().invoke(app, ["ingest", str(root), "--db", f"lancedb://{tmp_path / 'db'}", "--json", "-q"])
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["files_processed"] == 1
    assert {f["path"] for f in summary["files_failed"]} == {"a.md", "b.md", "caf\\xe9.md"}
