"""Give freed memory back to the OS once the worker is idle (glibc's malloc_trim; a no-op elsewhere), and keep
the long-lived heap out of the garbage collector's way (`freeze_heap`).

glibc keeps the small and middle-sized blocks a batch frees in its heaps, so after a burst of large requests
a worker's resident memory stays at its peak. An idle worker trims them (engine/worker/loop.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import platform
import sys
from functools import cache


@cache
def _glibc() -> ctypes.CDLL | None:
    """The process's glibc, or None where malloc is not glibc's."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


def release_memory() -> bool:
    """Return the free pages of every malloc heap to the OS (malloc_trim); True if any were returned."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def resident_bytes() -> int:
    """This process's resident memory now (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def freeze_heap() -> None:
    """Move every object alive now (a loaded model's modules, the framework's own) out of the collector's
    reach (`gc.freeze`). A full collection otherwise walks millions of them while holding the GIL, 100-150 ms
    on a 2-core machine, and the event loop, /healthz included, stalls for that long under load; per-request
    garbage is still collected as before. Called after each model load, when what lives long has just been made.
    """
    gc.collect()
    gc.freeze()
