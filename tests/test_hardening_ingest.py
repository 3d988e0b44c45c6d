"""Ingest walks that could drop data silently: a folder symlink back to the root is listed as skipped (with
why), not left out without a word."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.config import SourceConfig
from pipeline.sources import walk


def test_a_symlink_back_to_the_root_is_listed_as_skipped(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.md").write_text("x")
    os.symlink(root, root / "a" / "back")  # absolute, to the root itself
    w = walk(root, SourceConfig())
    assert [f.rel for f in w.files] == ["a/x.md"]
    skipped = dict(w.skipped)
    assert "a/back" in skipped and "already walked" in skipped["a/back"], w.skipped
