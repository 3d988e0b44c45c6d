"""What an ingest is pointed at: a root checked before anything is opened or recorded, and a one-file walk.

`check_root` turns a path into the absolute root a run records, or raises a one-line ConfigError (a path
that does not exist, a symlink loop, a name that is not UTF-8) before any store or manifest is touched.
`walk_root` walks a folder (pipeline.sources.walk) or takes a single file as a one-file walk.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from pipeline.config import ConfigError, SourceConfig
from pipeline.sources import Root, SourceFile, Walk, shown_name, walk


def check_root(path: Path | str) -> Path:
    """The absolute, resolved root of an ingest; a one-line ConfigError when it cannot be one."""
    raw = os.fsdecode(path)
    shown = shown_name(raw)
    if shown != raw:
        raise ConfigError(f"the path '{shown}' is not valid UTF-8: rename it to ingest it", code="INVALID_PATH")
    try:
        resolved = Path(raw).expanduser().resolve(strict=True)
    except RuntimeError:  # a symlink loop (Python 3.11)
        raise ConfigError(f"{raw}: symlink loop, nothing to ingest", code="INVALID_PATH") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ConfigError(f"{raw}: symlink loop, nothing to ingest", code="INVALID_PATH") from None
        if isinstance(e, FileNotFoundError):
            raise ConfigError(f"no such file or folder: {raw}", code="PATH_NOT_FOUND") from None
        raise ConfigError(f"cannot open {raw}: {e.strerror or e}", code="INVALID_PATH") from None
    if shown_name(str(resolved)) != str(resolved):
        raise ConfigError(f"the path {shown_name(str(resolved))!r} is not valid UTF-8: rename it", code="INVALID_PATH")
    if not (resolved.is_dir() or resolved.is_file()):
        raise ConfigError(f"{raw} is neither a folder nor a regular file", code="INVALID_PATH")
    return resolved


def walk_file(path: Path) -> Walk:
    """A single file as a walk: its folder is the read root, the file its only entry (read like any other)."""
    result = Walk(path)
    try:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            size = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)
    except OSError as e:
        result.errors.append((str(path), f"cannot open: {e.strerror or e}"))
        return result
    problem = None if stat.S_ISREG(size.st_mode) else "not a regular file: not read"
    root = Root(path.parent, (st.st_dev, st.st_ino))
    result.files.append(SourceFile(path, path.name, size.st_size, (path.name,), root, problem))
    return result


def walk_root(root: Path, cfg: SourceConfig) -> Walk:
    """The files of a root: every included file under a folder, or the one file a root names."""
    return walk_file(root) if root.is_file() else walk(root, cfg)
