"""Node embeddings of a taxonomy, built once per (taxonomy digest, model) and kept in a bounded LRU cache.

A node's own vector is the mean of two embeddings: its own text ("name: description. For example: ...")
and the same text under its full path ("Roads > Parking > Illegal parking: ..."), so a name-only leaf
still carries its parents' meaning. An internal node is represented by a prototype: its own vector mixed
with the mean of its children's prototypes, so "Gaming" also looks like the consoles and controllers under
it. Both live in one matrix `vectors`, row i for node i (the root's row is unused). The cosine softmax
temperature is measured on the taxonomy when the index is built (agent_tools/taxonomy/calibration.py). An
index fitted to labelled texts (`shoal taxonomy fit`, agent_tools/taxonomy/fit.py) adds a head the scorer
mixes in (agent_tools/taxonomy/scorer.py); it is read from the file saved beside the taxonomy.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent_tools.adapter_files import check as check_adapter
from agent_tools.errors import TaxonomyError
from agent_tools.taxonomy.calibration import REFERENCE_LEAVES, Calibration, none_bias, taxonomy_temperature
from agent_tools.taxonomy.head import Head
from agent_tools.taxonomy.tree import Taxonomy

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend
    from engine.tasks.results import JSONObject

INDEX_VERSION = (
    "own+path+proto0.5+outside+temperature/v4"  # part of the cache key: change it when the representation changes
)
SELF_WEIGHT = 0.5  # share of an internal node's own text in its prototype

FORMAT = "shoal-taxonomy-fit/2"  # the fitted index file `shoal taxonomy fit` saves


@dataclass(eq=False)
class TaxonomyIndex:
    """A taxonomy plus its node matrix and the array views the search needs."""

    taxonomy: Taxonomy
    model: str
    vectors: np.ndarray  # (n, dim) float32, unit rows
    child_ptr: np.ndarray  # CSR: children of i are child_idx[child_ptr[i]:child_ptr[i+1]]
    child_idx: np.ndarray
    is_leaf: np.ndarray
    leaves: np.ndarray  # leaf indices, ascending (preorder)
    size: np.ndarray  # subtree sizes: node i's subtree is i .. i + size[i] - 1
    parent: np.ndarray
    depth: np.ndarray
    reference: np.ndarray  # the leaves whose names are the taxonomy's pseudo-queries
    calibration: Calibration = Calibration()
    fitted: str | None = None  # the fitted index file this came from, None when zero-shot
    outside: np.ndarray | None = None  # (k, dim) unit rows: general topics no node resembles (outside.py)
    outside_names: tuple[str, ...] = ()
    head: Head | None = None  # fitted: the head the scorer mixes with the zero-shot logits
    lora: str | None = None  # fitted with a tuned encoder: the adapter folder every text is embedded with

    @property
    def nbytes(self) -> int:
        arrays = (self.vectors, self.child_ptr, self.child_idx, self.is_leaf, self.leaves, self.size)
        extra = self.outside.nbytes if self.outside is not None else 0
        extra += self.head.coef.nbytes if self.head is not None else 0
        return sum(a.nbytes for a in arrays) + self.parent.nbytes + self.depth.nbytes + self.reference.nbytes + extra


def own_text(t: Taxonomy, i: int) -> str:
    """A node's text without its path: what leaves are embedded as."""
    text = f"{t.names[i]}: {t.descriptions[i]}" if t.descriptions[i] else t.names[i]
    if t.examples[i]:
        text += f". For example: {'; '.join(t.examples[i])}"
    return text


def structure(t: Taxonomy) -> dict[str, np.ndarray]:
    """The tree as numpy arrays (CSR children, leaves, sizes), linear in its size."""
    import numpy as np

    counts = np.fromiter((len(c) for c in t.children), dtype=np.int64, count=len(t))
    child_ptr = np.zeros(len(t) + 1, dtype=np.int64)
    np.cumsum(counts, out=child_ptr[1:])
    child_idx = np.fromiter((c for kids in t.children for c in kids), dtype=np.int64, count=int(child_ptr[-1]))
    is_leaf = counts == 0
    is_leaf[0] = False
    return {
        "child_ptr": child_ptr,
        "child_idx": child_idx,
        "is_leaf": is_leaf,
        "leaves": np.flatnonzero(is_leaf),
        "size": np.asarray(t.size, dtype=np.int64),
        "parent": np.asarray(t.parent, dtype=np.int64),
        "depth": np.asarray(t.depth, dtype=np.int64),
        "reference": reference_leaves(np.flatnonzero(is_leaf)),
    }


def reference_leaves(leaves: np.ndarray) -> np.ndarray:
    """At most REFERENCE_LEAVES leaves, evenly spread over the preorder (so over the whole tree)."""
    import numpy as np

    if leaves.size <= REFERENCE_LEAVES:
        return leaves
    return leaves[np.linspace(0, leaves.size - 1, REFERENCE_LEAVES).round().astype(np.int64)]


def prototypes(own: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Bottom-up, one depth at a time: proto(i) = unit(w * own(i) + (1 - w) * unit(mean of children's protos))."""
    import numpy as np

    vectors = own.copy()
    ptr, idx, depth, is_leaf = arrays["child_ptr"], arrays["child_idx"], arrays["depth"], arrays["is_leaf"]
    internal = np.flatnonzero(~is_leaf)
    internal = internal[internal > 0]
    for d in range(int(depth.max()) - 1, 0, -1):
        nodes = internal[depth[internal] == d]
        if nodes.size == 0:
            continue
        starts, stops = ptr[nodes], ptr[nodes + 1]
        lengths = stops - starts
        segment = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        kids = idx[segment + np.arange(lengths.sum())]
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        means = np.add.reduceat(vectors[kids], offsets, axis=0) / lengths[:, None]
        means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
        mixed = SELF_WEIGHT * own[nodes] + (1 - SELF_WEIGHT) * means
        vectors[nodes] = mixed / np.maximum(np.linalg.norm(mixed, axis=1, keepdims=True), 1e-12)
    return vectors


async def node_vectors(t: Taxonomy, backend: ModelBackend, model: str) -> np.ndarray:
    """Row i: unit(mean of node i's own-text and path-text embeddings); row 0 (the root) is zero. Texts that
    are the same (a top-level node's path is its name) are embedded once, all in one batched call."""
    import numpy as np

    own = [own_text(t, i) for i in range(1, len(t))]
    path = [t.node_text(i) for i in range(1, len(t))]
    unique = list(dict.fromkeys(own + path))
    where = {text: k for k, text in enumerate(unique)}
    embedded = await backend.embed(model, unique)
    mixed = embedded[[where[x] for x in own]] + embedded[[where[x] for x in path]]
    mixed /= np.maximum(np.linalg.norm(mixed, axis=1, keepdims=True), 1e-12)
    return np.concatenate([np.zeros((1, mixed.shape[1]), dtype=np.float32), mixed.astype(np.float32)])


async def build_index(t: Taxonomy, backend: ModelBackend, model: str, own: np.ndarray | None = None) -> TaxonomyIndex:
    """Embed every node once (batched through the engine), derive the prototypes, measure the temperature."""
    if own is None:
        own = await node_vectors(t, backend, model)
    arrays = structure(t)
    vectors = await asyncio.to_thread(prototypes, own, arrays)
    index = make_index(t, model, vectors, arrays, Calibration(), None)
    names = await reference_names(index, backend)
    index = await with_outside(index, backend)
    index.calibration = await asyncio.to_thread(measured, index, names)
    return index


async def reference_names(index: TaxonomyIndex, backend: ModelBackend) -> np.ndarray:
    """The bare names of the reference leaves, embedded as texts: the taxonomy's pseudo-queries."""
    return await backend.embed(index.model, [index.taxonomy.names[int(i)] for i in index.reference], is_query=True)


def measured(index: TaxonomyIndex, names: np.ndarray) -> Calibration:
    """The cosine temperature measured on the reference names (agent_tools/taxonomy/calibration.py)."""
    import numpy as np

    leaves = index.leaves
    if leaves.size < 2:
        return Calibration(source="one leaf: nothing to measure")
    own = np.searchsorted(leaves, index.reference)
    parents = [int(index.parent[int(r)]) for r in index.reference]
    under = [np.arange(*np.searchsorted(leaves, [p, p + int(index.size[p])])) for p in parents]
    is_top = np.array([p == 0 for p in parents])
    sims = names @ index.vectors[leaves].T
    temperature = taxonomy_temperature(sims, own, under, is_top)
    outside = (names @ index.outside.T).max(axis=1) if index.outside is not None and len(index.outside) else sims[:0, 0]
    bias = none_bias(sims, own, outside, temperature)
    return Calibration(temperature, bias, f"measured on {len(own)} of its {len(leaves)} leaf names")


async def with_outside(index: TaxonomyIndex, backend: ModelBackend) -> TaxonomyIndex:
    """The index with the general topics that compete with its leaves (agent_tools/taxonomy/outside.py)."""
    from agent_tools.taxonomy.outside import outside_topics

    vectors, names = await outside_topics(backend, index.model, index.vectors[1:])
    index.outside, index.outside_names = vectors, tuple(names)
    return index


def index_from(
    t: Taxonomy, model: str, own: np.ndarray, calibration: Calibration, fitted: str | None, head: Head | None = None
) -> TaxonomyIndex:
    """An index from given own vectors, calibration and (fitted) head."""
    arrays = structure(t)
    index = make_index(t, model, prototypes(own, arrays), arrays, calibration, fitted)
    index.head = head
    return index


def make_index(
    t: Taxonomy,
    model: str,
    vectors: np.ndarray,
    arrays: dict[str, np.ndarray],
    calibration: Calibration,
    fitted: str | None,
) -> TaxonomyIndex:
    a = arrays
    return TaxonomyIndex(
        t, model, vectors, a["child_ptr"], a["child_idx"], a["is_leaf"], a["leaves"], a["size"], a["parent"],
        a["depth"], a["reference"], calibration, fitted,
    )  # fmt: skip


class IndexCache:
    """LRU of built indexes keyed by (taxonomy digest, model, representation version), bounded in entries and
    bytes, so a long-running server does not grow with the taxonomies it is sent. One build per key at a time."""

    def __init__(self, max_entries: int = 8, max_bytes: int = 1 << 30) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, ...], TaxonomyIndex] = OrderedDict()
        self._building: dict[tuple[str, ...], asyncio.Future[TaxonomyIndex]] = {}
        self._lock = threading.Lock()  # the blocking tool functions may use the cache from several threads
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return sum(i.nbytes for i in self._items.values())

    async def get(self, t: Taxonomy, backend: ModelBackend, model: str, fitted: Path | None = None) -> TaxonomyIndex:
        """The index of (t, model): built once, or read from a fitted index file when one is given."""
        key: tuple[str, ...] = (t.digest, model, INDEX_VERSION)
        if fitted is not None:
            stat = fitted.stat()
            key += (str(fitted.resolve()), str(stat.st_mtime_ns), str(stat.st_size))
        with self._lock:
            if key in self._items:
                self.hits += 1
                self._items.move_to_end(key)
                return self._items[key]
        pending = self._building.get(key)
        if pending is not None and pending.get_loop() is asyncio.get_running_loop():
            return await asyncio.shield(pending)
        self.misses += 1
        future: asyncio.Future[TaxonomyIndex] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            if fitted is not None:
                loaded = await asyncio.to_thread(load_fitted, fitted, t, model)
                index = await with_outside(loaded, backend.with_lora(loaded.lora))
            else:
                index = await build_index(t, backend, model)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: a failed build with no other waiter is not "never retrieved"
            raise
        finally:
            self._building.pop(key, None)
        future.set_result(index)
        self._put(key, index)
        return index

    def _put(self, key: tuple[str, ...], index: TaxonomyIndex) -> None:
        with self._lock:
            self._items[key] = index
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries or (len(self._items) > 1 and self.nbytes > self.max_bytes):
                self._items.popitem(last=False)


def read_meta(path: Path) -> JSONObject:
    """The JSON saved with a fitted index (agent_tools.taxonomy.fit.FittedMeta), checked field by field by
    the caller."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
    except (OSError, ValueError, KeyError) as e:
        raise TaxonomyError(f"fitted index {path} cannot be read: {e}") from None
    if not isinstance(meta, dict):
        raise TaxonomyError(f"fitted index {path} is not a {FORMAT} file")
    return meta


def load_fitted(path: Path, t: Taxonomy, model: str) -> TaxonomyIndex:
    """The index saved by `shoal taxonomy fit`; a clear error when it belongs to another taxonomy or model."""
    import numpy as np

    meta = read_meta(path)
    if meta.get("format") != FORMAT:
        raise TaxonomyError(f"fitted index {path} is not a {FORMAT} file")
    if meta["digest"] != t.digest:
        raise TaxonomyError(
            f"fitted index {path} was fitted to another version of this taxonomy; run `shoal taxonomy fit` again"
        )
    if meta["model"] != model:
        raise TaxonomyError(f"fitted index {path} was fitted for model {meta['model']!r}, not {model!r}")
    try:
        with np.load(path, allow_pickle=False) as z:
            own, (temperature, bias) = z["own"], z["calibration"].tolist()
            coef, intercept, classes, mixing = z["coef"], z["intercept"], z["classes"], z["mix"].tolist()
    except KeyError:
        raise TaxonomyError(f"fitted index {path} is from an older version; run `shoal taxonomy fit` again") from None
    if own.shape[0] != len(t):
        raise TaxonomyError(f"fitted index {path} has {own.shape[0]} rows for a taxonomy of {len(t)} nodes")
    if coef.shape != (classes.size, own.shape[1]) or intercept.shape != classes.shape or len(mixing) != 3:
        raise TaxonomyError(f"fitted index {path} has a head of shape {coef.shape} for {own.shape[1]} dims")
    head = Head(coef, intercept, classes.astype(np.int64), *(float(v) for v in mixing))
    index = index_from(t, model, own, Calibration(temperature, bias, str(meta["source"])), str(path), head)
    if meta.get("lora"):
        adapter = (path.parent / str(meta["lora"])).resolve()
        if not (adapter / "adapter_config.json").is_file():
            raise TaxonomyError(
                f"fitted index {path} needs its tuned adapter {adapter}; run `shoal taxonomy fit` again"
            )
        recorded = meta.get("lora_digest")
        check_adapter(adapter, recorded if isinstance(recorded, str) else None, path)
        index.lora = str(adapter)
    return index
