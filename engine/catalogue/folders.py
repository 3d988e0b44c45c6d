"""Which folders a model id or LoRA name may reach: id checks, canonical folders, model roots, the local switch.

A server answers remote clients, so its filesystem is not theirs to name: with local folders off (the
default of `shoal serve` and `shoal worker`), an id resolves only to a catalogue card or to a folder under
a configured root, and is never expanded, joined to the working directory or followed out of its root.
With them on (the SDK and CLI), any folder may be named. Either way a folder is canonicalised first, so
every spelling of it (`DIR`, `DIR/`, `DIR//`, `./DIR`, a symlink) is one model with one id.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InvalidInput

# A catalogue-style id: slash-separated names of letters, digits, '.', '_' and '-', each starting with a
# letter or digit (so never '', '.', '..', '~user' or an absolute path).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*(?:/[A-Za-z0-9][A-Za-z0-9._\-]*)*")
ROOT_SCAN_LIMIT = 512  # folders listed from the model roots at most (a listing, not a walk of the disk)


def check_id(value: str, what: str, limit: int) -> None:
    """400 for an empty, over-long or unprintable id (control characters, lone surrogates)."""
    if not value:
        raise InvalidInput(f"the {what} is empty")
    if len(value) > limit:
        raise InvalidInput(f"the {what} is {len(value)} characters long; the limit is {limit}")
    if not value.isprintable():
        raise InvalidInput(f"the {what} has control characters or unencodable code points")


def canonical(folder: Path) -> Path | None:
    """The canonical folder: home expanded, links and dots resolved, and a leading '//' made '/' (POSIX lets
    it differ from '/', Linux does not, so it would be a second spelling of the same folder)."""
    try:
        real = folder.expanduser().resolve()
    except (OSError, RuntimeError, ValueError):  # ~nosuchuser, a loop of symlinks, a NUL
        return None
    text = str(real)
    return Path("/" + text.lstrip("/")) if text.startswith("//") else real


def _is_dir(folder: Path) -> bool:
    try:
        return folder.is_dir()
    except OSError:  # a name too long for the filesystem, a permission error on the way
        return False


def under(root: Path, name: str) -> tuple[str, Path] | None:
    """(canonical relative name, folder) of `root/name` when `name` is a plain relative name whose real
    folder stays inside the root's real folder; None otherwise. The name's spelling does not matter."""
    if not NAME.fullmatch(name):
        return None
    base = canonical(root)
    folder = canonical(root / name) if base is not None else None
    if base is None or folder is None or not folder.is_relative_to(base) or folder == base or not _is_dir(folder):
        return None
    return folder.relative_to(base).as_posix(), folder


@dataclass(frozen=True)
class FolderPolicy:
    """Where model folders may come from: the model roots, and any folder when `local` is on."""

    local: bool = True
    roots: tuple[Path, ...] = ()

    def find(self, name: str) -> tuple[str, Path] | None:
        """(model id, canonical folder) for a name this policy serves, else None. A root folder's id is its
        canonical path under the root; a local folder's id is its canonical absolute path."""
        for root in self.roots:
            found = under(root, name)
            if found is not None:
                return found
        if not self.local:
            return None
        folder = canonical(Path(name))
        if folder is None or not _is_dir(folder):
            return None
        return str(folder), folder

    def root_folders(self) -> Iterator[tuple[str, Path]]:
        """(id, folder) of every checkpoint (a folder with config.json) one or two levels under a root."""
        seen = 0
        for root in self.roots:
            base = canonical(root)
            if base is None or not _is_dir(base):
                continue
            for config in sorted(base.glob("*/config.json")) + sorted(base.glob("*/*/config.json")):
                found = under(base, config.parent.relative_to(base).as_posix())
                if found is None:
                    continue
                yield found
                seen += 1
                if seen >= ROOT_SCAN_LIMIT:
                    return

    def describe(self) -> str:
        """What this policy serves, for a not-found message (no server paths)."""
        if self.local:
            return "a catalogue id, or a checkpoint folder on the server"
        if self.roots:
            return "a catalogue id, or the name of a checkpoint folder under the server's model roots"
        return "a catalogue id (local model folders are off on this server)"
