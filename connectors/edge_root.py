"""A Qdrant Edge store folder held by this process: its marker, its lock file and its open shards."""

from __future__ import annotations

import fcntl
import json
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import qdrant_edge as qe

from connectors.base import StoreError

MARKER = "shoal-qdrant-edge.json"
LOCK = ".shoal-edge.lock"
LAYOUT = "shoal_layout.json"
FORMAT = 1

_OPEN: dict[str, _Held] = {}  # path -> its root and users: one process holds a store folder at a time
_OPEN_MU = threading.Lock()


class EdgeRoot:
    """A store folder held by this process: its lock and its open shards, shared by every store object on it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mu = threading.RLock()
        self.shards: dict[str, qe.EdgeShard] = {}
        _check_folder(path)
        try:
            path.mkdir(parents=True, exist_ok=True)
            self.lock: IO[bytes] = open(path / LOCK, "ab")  # noqa: SIM115 - held until close()
        except OSError as e:
            raise StoreError(f"cannot open {path}: {e.strerror or e}", "STORE_UNAVAILABLE") from None
        try:
            fcntl.flock(self.lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.lock.close()
            raise StoreError(
                f"another process has {path} open (a Qdrant Edge store is used by one process at a time)",
                code="STORE_LOCKED",
            ) from None
        marker = path / MARKER
        if not marker.exists():
            marker.write_text(json.dumps({"format": FORMAT, "engine": "qdrant-edge"}) + "\n")

    def shard(self, name: str) -> qe.EdgeShard:
        with self.mu:
            if name not in self.shards:
                folder = self.path / name
                if not (folder / "edge_config.json").exists():
                    raise StoreError(f"no collection {name!r} in qdrant+edge://{self.path}", code="NO_COLLECTION")
                self.shards[name] = _load(folder)
            return self.shards[name]

    def create(self, name: str, config: qe.EdgeConfig, layout: Mapping[str, object]) -> qe.EdgeShard:
        with self.mu:
            folder = self.path / name
            shard = qe.EdgeShard.create(str(folder), config)
            (folder / LAYOUT).write_text(json.dumps(layout) + "\n")
            self.shards[name] = shard
            return shard

    def reconfigure(self, name: str, config: qe.EdgeConfig) -> qe.EdgeShard:
        """Reopen a collection's shard with new settings (what `config` leaves unset stays as stored)."""
        with self.mu:
            old = self.shards.pop(name, None)
            if old is not None:
                old.close()
            self.shards[name] = _load(self.path / name, config)
            return self.shards[name]

    def drop(self, name: str) -> bool:
        with self.mu:
            shard = self.shards.pop(name, None)
            if shard is not None:
                shard.close()
            folder = self.path / name
            if not (folder / "edge_config.json").exists():
                return False
            shutil.rmtree(folder)
            return True

    def close(self) -> None:
        with self.mu:
            for shard in self.shards.values():
                shard.close()
            self.shards.clear()
            self.lock.close()


@dataclass
class _Held:
    """A store folder's root and how many store objects use it."""

    root: EdgeRoot
    users: int = 0


def _check_folder(path: Path) -> None:
    """Refuse a folder that holds something other than an Edge store (a file, another store, a corrupt marker)."""
    if path.exists() and not path.is_dir():
        raise StoreError(f"cannot open {path}: not a folder", "STORE_UNAVAILABLE")
    if not path.is_dir() or not any(path.iterdir()):
        return
    marker = path / MARKER
    if not marker.exists():
        if (path / "meta.json").exists() and (path / "collection").is_dir():
            hint = "it is a qdrant-client local-mode store: open it with qdrant+local://"
        else:
            hint = f"it has other files and no {MARKER}: point qdrant+edge:// at a new or empty folder"
        raise StoreError(f"{path} is not a Qdrant Edge store; {hint}", code="STORE_INVALID")
    try:
        fmt = json.loads(marker.read_text()).get("format")
    except (ValueError, OSError, AttributeError):
        fmt = None
    if fmt != FORMAT:
        raise StoreError(f"{marker} is unreadable or of another format ({fmt!r}); expected {FORMAT}", "STORE_INVALID")


def _load(folder: Path, config: qe.EdgeConfig | None = None) -> qe.EdgeShard:
    try:
        return qe.EdgeShard.load(str(folder), config)
    except Exception as e:  # noqa: BLE001 - the bindings raise a bare Exception for every load failure
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise StoreError(f"cannot load the Qdrant Edge shard {folder}: {first}", code="STORE_CORRUPT") from None


def open_root(path: Path) -> EdgeRoot:
    """The process's hold on a store folder, taken on first use (refused when another process holds it)."""
    with _OPEN_MU:
        entry = _OPEN.get(str(path))
        if entry is None:
            entry = _OPEN[str(path)] = _Held(EdgeRoot(path))
        entry.users += 1
        return entry.root


def release_root(path: Path) -> None:
    """Give back one use of a store folder; the last one closes its shards and its lock."""
    with _OPEN_MU:
        entry = _OPEN.get(str(path))
        if entry is not None:
            entry.users -= 1
            if entry.users <= 0:
                entry.root.close()
                del _OPEN[str(path)]
