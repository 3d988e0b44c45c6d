"""The folder an ingest runs over: resolved once, and refused with its reason when it cannot be recorded."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import ConfigError


class RootError(ConfigError):
    """An ingest root that cannot be walked or recorded; raised before any store, model or file is opened."""

    code = "INVALID_ROOT"


def shown_path(path: Path | str) -> str:
    """A path as text: bytes that are not UTF-8 (surrogate-escaped by the OS layer) become \\xNN."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def resolve_root(root: Path | str) -> Path:
    """The root's absolute real path; RootError when a symlink loop hides it or its path is not UTF-8.

    The path is recorded as text in the manifest and in every stored row, so a path that is not UTF-8 is
    refused up front rather than failing the first write. A root that does not exist resolves; the walk
    reports it as an entry that is not a folder.
    """
    try:
        path = Path(root).expanduser().resolve()
    except RuntimeError as e:  # Python 3.11: "Symlink loop from ..."
        raise RootError(f"cannot ingest {shown_path(root)}: {e} (a symlink loop)") from None
    except OSError as e:
        raise RootError(f"cannot ingest {shown_path(root)}: {e.strerror or e}") from None
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise RootError(
            f"cannot ingest {shown_path(path)}: its path is not valid UTF-8; rename the folder, or ingest it "
            "through a folder (or symlink) whose path is UTF-8"
        ) from None
    return path
