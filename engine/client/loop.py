"""The blocking facades' event-loop thread, and the exit hook that closes every open facade before Python joins its
threads (a script that never calls `close()` still exits at once, with nothing on stderr)."""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Protocol, TypeVar

from engine.errors import ShoalError

log = logging.getLogger("shoal")
T = TypeVar("T")
EXIT_PATIENCE_S = 10.0  # how long the exit hook waits for one facade's close before it leaves it

_open: weakref.WeakValueDictionary[int, Closable] = weakref.WeakValueDictionary()
_hooked = False
_hook_lock = threading.Lock()


class Closable(Protocol):
    """What the exit hook closes: an object with a bounded `close_at_exit()`."""

    def close_at_exit(self) -> None: ...


class LoopThread:
    """An event loop on its own thread; `run` executes a coroutine there and blocks for its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        # A daemon thread, so a failed exit hook can never hang the interpreter; the hook joins it normally.
        self._thread = threading.Thread(target=self.loop.run_forever, name="shoal-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[object, None, T], timeout: float | None = None) -> T:
        """The coroutine's result; a ShoalError is raised here with the loop thread's frames left out, so a
        script that does not catch it shows the caller's lines and the one-line message."""
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)
        except ShoalError as e:
            raise e.with_traceback(None) from None

    def stop(self, timeout: float = 5.0) -> None:
        """Shut down the loop's default executor, stop the loop and join its thread, then close the loop."""
        if self.loop.is_closed():
            return
        if self.loop.is_running():
            try:
                self.run(self.loop.shutdown_default_executor(), timeout)
            except Exception:  # noqa: BLE001 - stopping goes on whatever the executor says
                log.warning("the event loop's executor did not shut down cleanly", exc_info=True)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()


def close_at_exit(facade: Closable) -> None:
    """Close `facade` when the interpreter exits, if it is still open and alive then."""
    global _hooked
    with _hook_lock:
        _open[id(facade)] = facade
        if not _hooked:
            _register_before_thread_join(_close_open)
            _hooked = True


def forget(facade: Closable) -> None:
    """A closed facade: nothing to do at exit."""
    _open.pop(id(facade), None)


def _close_open() -> None:
    for facade in list(_open.values()):
        try:
            facade.close_at_exit()
        except Exception:  # noqa: BLE001 - one facade that fails to close must not keep the others open
            log.debug("closing %r at exit failed", facade, exc_info=True)


def _register_before_thread_join(fn: Callable[[], None]) -> None:
    """Run `fn` when the main thread has finished, before the interpreter joins its non-daemon threads.

    `atexit` runs only after that join, which waits for every thread-pool worker (concurrent.futures registers
    its join the same way): a background precision tune in a pool thread kept a script from exiting for a
    minute. `threading._register_atexit` is the standard library's hook for exactly this moment; hooks run
    last-registered first, so this one (registered after concurrent.futures is imported) runs before that join.
    """
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(fn)
    else:  # pragma: no cover - an interpreter without the hook: close as late as atexit allows
        import atexit

        atexit.register(fn)
