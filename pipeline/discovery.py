"""A warm `shoal serve --db` found without being named: the server writes a discovery file beside the
embedded store it serves, and `shoal search` on that store reads it, checks the server is alive, and asks it.

The file is `shoal-serve.json` in the store's folder (LanceDB, Chroma or Qdrant local folders; a server store
has no folder here, so nothing is written), holding the server's URL, process id and host. It is removed when
the server exits; a stale one (the process gone, or no answer on /healthz within a second) is ignored.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from pipeline.remote import EMBEDDED, store_location

FILE = "shoal-serve.json"
PROBE_S = 1.0  # a live server answers /healthz at once; anything slower is not worth waiting for


@dataclass(frozen=True)
class Found:
    """What the discovery file said and whether the server behind it answered."""

    path: Path
    url: str | None  # the live server's URL; None when the file is stale
    why: str  # one line for --verbose


def store_folder(db: str) -> Path | None:
    """The folder of an embedded store (where the discovery file goes), or None for a server store."""
    scheme, _, rest = store_location(db).partition("://")
    return Path(rest) if scheme in EMBEDDED and rest else None


def _local_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def announce(db: str, host: str, port: int) -> Path | None:
    """Write the discovery file for a server about to listen on host:port and serve `db`; removed at exit.
    Nothing is written for a server store or a folder that does not exist (serving never creates a store)."""
    folder = store_folder(db)
    if folder is None or not folder.is_dir():
        return None
    record = {"url": _local_url(host, port), "pid": os.getpid(), "host": socket.gethostname()}
    record |= {"db": store_location(db), "started": time.time()}
    path = folder / FILE
    try:
        fd, tmp = tempfile.mkstemp(prefix=".shoal-serve-", dir=folder)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:
        return None  # a read-only store: searches just do not find this server
    atexit.register(_withdraw, path, os.getpid())
    _withdraw_on_signal(path)
    return path


def _withdraw_on_signal(path: Path) -> None:
    """Also remove the file when SIGTERM ends the process: uvicorn re-raises the signal after its graceful
    shutdown with the handler it found, which by default kills the process without running atexit."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    pid = os.getpid()

    def on_term(signum: int, frame: FrameType | None) -> None:
        _withdraw(path, pid)
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signum)

    signal.signal(signal.SIGTERM, on_term)


def _withdraw(path: Path, pid: int) -> None:
    """Remove the discovery file if it is still this process's (a second server may have replaced it)."""
    try:
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _answers(url: str) -> bool:
    import urllib.request  # the standard library's: nothing heavier on a cold start

    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=PROBE_S) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def discover(db: str) -> Found | None:
    """The live local server that announced it serves `db`; None when no file is there."""
    folder = store_folder(db)
    if folder is None:
        return None
    path = folder / FILE
    try:
        record = json.loads(path.read_text())
        url, pid, host = str(record["url"]), int(record["pid"]), str(record["host"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return Found(path, None, f"ignoring {path}: not a discovery file shoal wrote")
    if host == socket.gethostname() and not _alive(pid):
        return Found(path, None, f"ignoring {path}: the server that wrote it (pid {pid}) is gone")
    if not _answers(url):
        return Found(path, None, f"ignoring {path}: no answer from {url}/healthz within {PROBE_S:.0f} s")
    return Found(path, url, f"using the warm server at {url} that serves this store (from {path})")
