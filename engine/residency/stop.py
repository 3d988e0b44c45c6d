"""Stopping a precision tune between two batches, so closing an engine never waits for a whole gate run."""

from __future__ import annotations

import threading


class TuneStopped(Exception):
    """The tune's stop flag was set: its result is not recorded."""


def check(stop: threading.Event | None) -> None:
    """Raise TuneStopped once `stop` is set; the gates call this before each batch they run."""
    if stop is not None and stop.is_set():
        raise TuneStopped
