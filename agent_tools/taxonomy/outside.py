"""Everyday topics outside a taxonomy: a text closer to one of them than to every leaf fits nothing.

With MiniLM-sized embedders an unrelated question ("which mobile network has the best signal here?") is
often as close to some leaf as a chatty in-domain message, so no score threshold on the leaves alone
tells them apart. Competing against a fixed list of general topics (agent_tools/data/off_topics.txt:
weather, recipes, sports, travel, ...) does: the list is embedded once per taxonomy and model, and every
topic that resembles a node of the taxonomy (cosine at least SAME_TOPIC, e.g. "Video games" in a shop
catalogue with a gaming department) is dropped, so a taxonomy never loses its own subject to the list.
The list and SAME_TOPIC were written and chosen on bench/data/taxonomy/support only.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend

SAME_TOPIC = 0.6  # a general topic at least this close to a node belongs to the taxonomy: not competing


@cache
def off_topics() -> tuple[str, ...]:
    """The shipped list of general topics, one per line."""
    text = files("agent_tools").joinpath("data/off_topics.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


async def outside_topics(backend: ModelBackend, model: str, nodes: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(unit vectors, names) of the general topics no node of the taxonomy resembles. nodes: (n, dim) unit rows."""
    import numpy as np

    names = list(off_topics())
    vectors = (await backend.embed(model, names)).astype(np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    keep = (vectors @ nodes.T).max(axis=1) < SAME_TOPIC if nodes.size else np.ones(len(names), dtype=bool)
    return vectors[keep], [n for n, k in zip(names, keep.tolist(), strict=True) if k]
