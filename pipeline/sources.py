"""The folder walk and the safe read: include/exclude globs, no path followed out of the root, never a block.

The walk is a loop over an explicit stack (no recursion, any depth) that holds one folder open at a time
and opens each child relative to its parent without following symlinks. A symlink is followed only when
its resolved target stays inside the root; the file is then read by that real path. `read_source` opens a
file again component by component from the root with O_NOFOLLOW, and the file itself with O_NONBLOCK,
then checks with fstat that it is still a regular file: a file swapped after the walk for a symlink or a
FIFO is reported, never followed, and never blocks the run. An entry that cannot be ingested (a symlink
loop, a name that is not UTF-8, a FIFO) is kept as a file with a `problem`, so the run reports it as one
failed file and goes on.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pipeline.config import SourceConfig

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
KINDS = {stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device"}


class SourceError(Exception):
    """A file the run cannot read; the message is the reason recorded for it."""


@dataclass(frozen=True)
class Root:
    """The walked folder: its resolved path and identity (a root swapped during the run is not read)."""

    path: Path
    ident: tuple[int, int]


@dataclass
class SourceFile:
    """One entry the walk picked: where it is shown and recorded, and the real path it is read by."""

    path: Path  # absolute, as recorded (bytes of a non-UTF-8 name shown as \\xNN)
    rel: str  # relative to the root (posix), as recorded
    size: int
    real: tuple[str, ...] = ()  # components from the root to the file, no symlink among them
    root: Root | None = None
    problem: str | None = None  # set when the walk already knows the entry cannot be read


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


def shown_name(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (surrogate-escaped by the OS layer) become \\xNN."""
    if name.isascii():
        return name
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def _open_real(root_fd: int, parts: tuple[str, ...]) -> int:
    """A folder's fd, opened component by component from the root; a symlink on the way raises OSError."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class _Entry:
    name: str  # as the OS gave it (may hold surrogate escapes)
    kind: str  # dir | file | link, or what a special file is (FIFO, socket, ...)
    size: int = 0


@dataclass
class _Frame:
    rel: str
    real: tuple[str, ...]
    ident: tuple[int, int]
    entries: list[_Entry]
    next: int = 0


def _list(fd: int) -> list[_Entry]:
    """A folder's entries by name, typed without following symlinks; an entry gone meanwhile is left out."""
    out = []
    with os.scandir(fd) as it:
        for e in it:
            if e.is_symlink():
                out.append(_Entry(e.name, "link"))
            elif e.is_dir(follow_symlinks=False):
                out.append(_Entry(e.name, "dir"))
            else:
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                kind = "file" if stat.S_ISREG(st.st_mode) else KINDS.get(stat.S_IFMT(st.st_mode), "special file")
                out.append(_Entry(e.name, kind, st.st_size))
    return sorted(out, key=lambda e: e.name)


class _Walker:
    """One walk: a depth-first loop over an explicit stack, one folder fd open at a time (plus the root's)."""

    def __init__(self, root: Path, root_fd: int, cfg: SourceConfig, result: Walk) -> None:
        self.root, self.root_fd, self.cfg, self.out = root, root_fd, cfg, result
        self.ref = Root(root, _ident(root_fd))
        self.seen: set[tuple[int, int]] = {self.ref.ident}
        self.stack: list[_Frame] = []
        self.fd: int | None = None

    def included(self, rel: str) -> bool:
        return any(glob_match(rel, p) for p in self.cfg.include)

    def add(self, rel: str, real: tuple[str, ...], size: int, problem: str | None = None) -> None:
        self.out.files.append(SourceFile(self.root / rel, rel, size, real, self.ref, problem))

    def report(self, rel: str, reason: str) -> None:
        """An entry that cannot be read: a failed file when it would have been ingested, else refused."""
        if self.included(rel):
            self.add(rel, (), 0, reason)
        else:
            self.out.skipped.append((rel, reason))

    def run(self) -> None:
        self.fd = os.dup(self.root_fd)
        try:
            self.stack.append(_Frame("", (), self.ref.ident, _list(self.fd)))
        except OSError as e:
            self.out.errors.append((".", f"cannot list folder: {_why(e)}"))
            return
        try:
            while self.stack:
                top = self.stack[-1]
                if top.next >= len(top.entries):
                    self.stack.pop()
                    if self.stack:
                        self.up()
                    continue
                entry = top.entries[top.next]
                top.next += 1
                self.visit(top, entry)
        finally:
            if self.fd is not None:
                os.close(self.fd)

    def visit(self, top: _Frame, e: _Entry) -> None:
        name = shown_name(e.name)
        rel = f"{top.rel}/{name}" if top.rel else name
        if any(glob_match(rel, p) for p in self.cfg.exclude):
            return
        if name != e.name:  # a folder always (its files cannot be named), a file when the globs pick it
            if e.kind == "dir" or self.included(rel):
                what = "folder" if e.kind == "dir" else "file"
                self.add(rel, (), 0, f"{what} name is not valid UTF-8: not read (rename it to ingest it)")
            return
        real = (*top.real, e.name)
        if e.kind == "link":
            self.follow(rel, real)
        elif e.kind == "dir":
            self.descend(rel, real, lambda: os.open(e.name, DIR_FLAGS, dir_fd=self.fd))
        elif self.included(rel):
            if e.kind == "file":
                self.add(rel, real, e.size)
            else:
                self.add(rel, real, 0, f"not a regular file (a {e.kind}): not read")

    def follow(self, rel: str, real: tuple[str, ...]) -> None:
        """A symlink: followed only when its resolved target stays inside the root."""
        try:
            target = Path(os.path.realpath(os.path.join(self.root, *real), strict=True))
            st = os.stat(target)
        except OSError as e:
            if e.errno == errno.ELOOP:
                self.report(rel, "symlink loop: not followed")
            elif e.errno == errno.ENOENT:
                self.report(rel, "broken symlink (its target does not exist): not followed")
            else:
                self.report(rel, f"cannot resolve symlink: {_why(e)}")
            return
        try:
            parts = target.relative_to(self.root).parts
        except ValueError:
            self.out.skipped.append((rel, f"symlink to {target}, outside the root: not followed"))
            return
        if stat.S_ISDIR(st.st_mode):
            self.descend(rel, parts, lambda: _open_real(self.root_fd, parts))
        elif self.included(rel):
            if stat.S_ISREG(st.st_mode):
                self.add(rel, parts, st.st_size)
            else:
                self.add(rel, parts, 0, f"symlink to a {KINDS.get(stat.S_IFMT(st.st_mode), 'special file')}: not read")

    def descend(self, rel: str, real: tuple[str, ...], opener: Callable[[], int]) -> None:
        try:
            child = opener()
        except OSError as e:
            self.out.errors.append((rel, f"cannot open folder (changed during the walk?): {_why(e)}"))
            return
        try:
            ident = _ident(child)
            if ident in self.seen:  # a folder reached twice (a symlink loop inside the root): visited once
                os.close(child)
                self.out.skipped.append(
                    (rel, "a folder already walked (a symlink back into the root): not walked again")
                )
                return
            entries = _list(child)
        except OSError as e:
            os.close(child)
            self.out.errors.append((rel, f"cannot list folder: {_why(e)}"))
            return
        self.seen.add(ident)
        if self.fd is not None:
            os.close(self.fd)
        self.fd = child
        self.stack.append(_Frame(rel, real, ident, entries))

    def up(self) -> None:
        """Back to the parent folder through '..' (checked to be the same folder), else reopened from the root."""
        parent = self.stack[-1]
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                back = os.open("..", DIR_FLAGS, dir_fd=fd)
            except OSError:
                back = None
            os.close(fd)
            if back is not None:
                if _ident(back) == parent.ident:
                    self.fd = back
                    return
                os.close(back)
        try:
            self.fd = _open_real(self.root_fd, parent.real)
            if _ident(self.fd) != parent.ident:
                raise OSError(errno.ESTALE, "the folder was replaced during the walk")
        except OSError as e:
            self.out.errors.append((parent.rel or ".", f"cannot return to folder: {_why(e)}"))
            parent.next = len(parent.entries)  # its remaining entries are not walked: the walk is incomplete


def walk(root: Path | str, cfg: SourceConfig) -> Walk:
    """Every included file under root, sorted; symlinks are followed only while they stay inside the root."""
    try:
        root = Path(root).expanduser().resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop in the root's own path
        return Walk(Path(root), errors=[(str(root), f"cannot resolve the root: {e}")])
    result = Walk(root)
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        reason = "not a folder" if e.errno in (errno.ENOENT, errno.ENOTDIR) else f"cannot open: {_why(e)}"
        result.errors.append((str(root), reason))
        return result
    try:
        _Walker(root, root_fd, cfg, result).run()
    finally:
        os.close(root_fd)
    return result


def _too_large(size: int, max_mb: float) -> str:
    return f"file too large: {size / 2**20:.1f} MiB, over the {max_mb:g} MiB limit"


def read_source(f: SourceFile, max_mb: float) -> bytes:
    """The file's bytes, read by its real path without following any symlink and without blocking.

    Raises SourceError with the reason when the walk flagged the entry, when the file was replaced by a
    symlink or a non-regular file after the walk, when it is over `max_mb`, or when it cannot be read.
    """
    if f.problem:
        raise SourceError(f.problem)
    if f.root is None or not f.real:
        raise SourceError("not a file found by the walk")
    limit = int(max_mb * 2**20)
    if f.size > limit:
        raise SourceError(_too_large(f.size, max_mb))
    try:
        folder = _open_folder(f.root, f.real[:-1])
        try:
            return _read_in(folder, f.real[-1], limit, max_mb)
        finally:
            os.close(folder)
    except OSError as e:
        raise SourceError(f"cannot read: {_why(e)}") from e


def _open_folder(root: Root, parts: tuple[str, ...]) -> int:
    """The fd of the file's folder, checked to be under the same root the walk saw, no symlink followed."""
    root_fd = os.open(root.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if _ident(root_fd) != root.ident:
            raise SourceError("the root folder was replaced after the walk: not read")
        try:
            return _open_real(root_fd, parts)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise SourceError("a folder on its path was replaced after the walk: not followed") from e
            raise
    finally:
        os.close(root_fd)


def _read_in(folder: int, name: str, limit: int, max_mb: float) -> bytes:
    """Stat without following, open with O_NOFOLLOW | O_NONBLOCK, then fstat: still that regular file."""
    before = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if stat.S_ISLNK(before.st_mode):
        raise SourceError("replaced by a symlink after the walk: not followed")
    if not stat.S_ISREG(before.st_mode):
        kind = KINDS.get(stat.S_IFMT(before.st_mode), "special file")
        raise SourceError(f"not a regular file (a {kind}, replaced after the walk): not read")
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=folder)  # O_NONBLOCK: a FIFO swapped in meanwhile cannot block
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SourceError("replaced by a symlink after the walk: not followed") from e
        raise
    with open(fd, "rb", closefd=True) as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            raise SourceError("replaced while it was being opened: not read")
        if st.st_size > limit:
            raise SourceError(_too_large(st.st_size, max_mb))
        data = fh.read(st.st_size + 1)
        if len(data) > st.st_size:  # it grew since fstat: read on, up to the limit
            data += fh.read(limit + 1 - len(data))
    if len(data) > limit:
        raise SourceError(_too_large(len(data), max_mb))
    return data
