"""Which index a named taxonomy serves as its fit changes on disk: the newest fit that loads, else the one
served before it (with a warning in the log), so a fit being written or a broken one never fails the calls."""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from agent_tools.errors import InvalidInput

if TYPE_CHECKING:
    from agent_tools.backend import ModelBackend
    from agent_tools.taxonomy.index import IndexCache, TaxonomyIndex
    from agent_tools.taxonomy.tree import Taxonomy

log = logging.getLogger("shoal.tools")
Slot = tuple[str, str, str]  # (taxonomy name, model, taxonomy digest)
Version = tuple[int, ...]  # the fitted index's and its adapter's files (inode, size, mtime)


def version(fitted: Path) -> Version:
    """What changes whenever the fit or its adapter is rewritten: a retry is worth it only then."""
    from agent_tools.taxonomy.tune import adapter_folder
    from engine.catalogue.weights import adapter_signature

    try:
        s = os.stat(fitted)
        own: Version = (s.st_ino, s.st_size, s.st_mtime_ns)
    except OSError:
        own = (-1, -1, -1)
    return own + adapter_signature(adapter_folder(fitted))


class FitWatch:
    """Per named taxonomy and model: the index served last and the fit version that would not load, so a bad
    version is tried once (one warning), and the next write of the fit is tried again."""

    def __init__(self, kept: int = 64) -> None:
        self.kept = kept
        self._served: OrderedDict[Slot, TaxonomyIndex] = OrderedDict()
        self._broken: dict[Slot, Version] = {}
        self._lock = threading.Lock()

    async def index(
        self, cache: IndexCache, name: str, t: Taxonomy, backend: ModelBackend, model: str, fitted: Path | None
    ) -> TaxonomyIndex:
        slot = (name, model, t.digest)
        if fitted is None:
            return self._keep(slot, await cache.get(t, backend, model))
        seen = version(fitted)
        with self._lock:
            previous = self._served.get(slot)
            if previous is not None and self._broken.get(slot) == seen:
                return previous
        try:
            index = await cache.get(t, backend, model, fitted)
        except InvalidInput as e:  # the fit itself is unusable: not worth a retry until it is written again
            if previous is None:
                raise
            with self._lock:
                self._broken[slot] = seen
            log.warning("taxonomy %r: the fit at %s cannot be used, serving the previous one: %s", name, fitted, e)
            return previous
        except Exception as e:  # the engine failed on the way (overload, a model error): retried next call
            if previous is None:
                raise
            log.warning("taxonomy %r: the fit at %s did not load, serving the previous one: %s", name, fitted, e)
            return previous
        with self._lock:
            self._broken.pop(slot, None)
        return self._keep(slot, index)

    def _keep(self, slot: Slot, index: TaxonomyIndex) -> TaxonomyIndex:
        with self._lock:
            self._served[slot] = index
            self._served.move_to_end(slot)
            while len(self._served) > self.kept:
                dropped, _ = self._served.popitem(last=False)
                self._broken.pop(dropped, None)
        return index
