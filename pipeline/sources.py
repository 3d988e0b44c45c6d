"""The folder walk: include/exclude globs, a per-file size limit, no symlinks out of the root."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pipeline.config import SourceConfig


@dataclass
class SourceFile:
    """One file the walk picked: its absolute path and its path relative to the root (posix)."""

    path: Path
    rel: str
    size: int


@dataclass
class Walk:
    """What a walk found; `complete` is False when any folder could not be read (then nothing is deleted)."""

    root: Path
    files: list[SourceFile] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (rel path, reason): refused, not failed
    errors: list[tuple[str, str]] = field(default_factory=list)  # (rel path, reason): the walk is incomplete

    @property
    def complete(self) -> bool:
        return not self.errors


@cache
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def glob_match(rel: str, pattern: str) -> bool:
    """gitignore-like: a pattern without '/' matches any file or folder name; otherwise the whole path."""
    if "/" not in pattern.rstrip("/"):
        return bool(_glob_regex(pattern.rstrip("/")).match(rel.rsplit("/", 1)[-1]))
    return bool(_glob_regex(pattern).match(rel))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def walk(root: Path | str, cfg: SourceConfig) -> Walk:
    """Every included file under root, sorted; symlinks are followed only while they stay inside the root."""
    root = Path(root).expanduser().resolve()
    result = Walk(root)
    if not root.is_dir():
        result.errors.append((str(root), "not a folder"))
        return result
    seen_dirs: set[Path] = set()

    def visit(folder: Path, rel_folder: str) -> None:
        real = folder.resolve()
        if real in seen_dirs:  # a symlink loop inside the root
            return
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            result.errors.append((rel_folder or ".", f"cannot list folder: {e.strerror or e}"))
            return
        for entry in entries:
            rel = f"{rel_folder}/{entry.name}" if rel_folder else entry.name
            if any(glob_match(rel, p) for p in cfg.exclude):
                continue
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    target = path.resolve()
                    if not _inside(target, root):
                        result.skipped.append((rel, f"symlink to {target}, outside the root: not followed"))
                        continue
                if entry.is_dir():
                    visit(path, rel)
                    continue
                if not entry.is_file():
                    continue
                if not any(glob_match(rel, p) for p in cfg.include):
                    continue
                size = path.stat().st_size
            except OSError as e:
                result.errors.append((rel, f"cannot stat: {e.strerror or e}"))
                continue
            result.files.append(SourceFile(path, rel, size))  # over-size files are reported by the run

    visit(root, "")
    return result
