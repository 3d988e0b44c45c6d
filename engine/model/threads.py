"""One thread budget for torch, the tokenizer and the event loop, so they do not oversubscribe the cores.

A worker tokenises a batch and then runs its forward pass on the same thread, one after the other, so the
tokenizer's pool and torch's intra-op pool never run at once and may both use the budget. torch's inter-op
pool is not used by eager inference and is set to one thread. The event loop thread only parses and
serialises requests while a forward pass runs; it takes no thread of its own from the budget (measured: the
HTTP stage timers stay under 1% of a busy worker's time, see bench/roofline.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")
_compute: ThreadPoolExecutor | None = None
_compute_lock = threading.Lock()
_holders = 0  # engines running a worker in this process; the last to close joins the compute thread


@dataclass(frozen=True)
class ThreadPlan:
    """What `apply_threads` set: torch intra-op and inter-op threads, the tokenizer's pool size."""

    torch_threads: int
    interop_threads: int
    tokenizer_threads: int


def cpu_budget() -> int:
    """Cores this process may run on (its CPU affinity, which containers narrow), at least one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def apply_threads(threads: int | None) -> ThreadPlan:
    """Size every pool to `threads` (default: the cores this process may use). The tokenizer's pool
    (RAYON_NUM_THREADS) is sized only when the user has not, and takes effect before its first parallel use;
    TOKENIZERS_PARALLELISM=false still turns it off."""
    n = threads or cpu_budget()
    torch.set_num_threads(n)
    if torch.get_num_interop_threads() != 1:
        with suppress(RuntimeError):  # already started by earlier parallel work in this process: leave it
            torch.set_num_interop_threads(1)
    os.environ.setdefault("RAYON_NUM_THREADS", str(n))
    return ThreadPlan(torch.get_num_threads(), torch.get_num_interop_threads(), int(os.environ["RAYON_NUM_THREADS"]))


def compute_thread() -> ThreadPoolExecutor:
    """The process's one thread for forward passes. An OpenMP team belongs to the thread that opens a parallel
    region, and a finished team's threads spin for a while before they sleep: forwards handed to whichever
    pool thread is free (asyncio.to_thread) left an earlier team spinning on the cores the next one needed
    (measured: bf16 over HTTP ran 0.87x in-process with four clients; the forwards had moved over four threads)."""
    global _compute
    with _compute_lock:
        if _compute is None:
            _compute = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shoal-compute")
        return _compute


async def in_compute_thread(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)` on the compute thread (with the caller's context variables, as asyncio.to_thread)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(compute_thread(), call)


def hold_compute_thread() -> None:
    """An engine that runs a worker holds the compute thread until `release_compute_thread`."""
    global _holders
    with _compute_lock:
        _holders += 1


def release_compute_thread() -> None:
    """One holder fewer; the last one shuts the compute thread down and joins it (after its forward pass in
    flight, if any), so a closed engine leaves no thread behind; the next use starts a new one."""
    global _holders, _compute
    with _compute_lock:
        _holders = max(0, _holders - 1)
        if _holders or _compute is None:
            return
        pool, _compute = _compute, None
    pool.shutdown(wait=True)
