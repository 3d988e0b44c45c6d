"""Fit a taxonomy's routing to labelled texts: centred on the texts, a light linear head over the leaves, and
the calibration.

The labelled texts (a JSONL file of `{"text", "label"}`, the label a node's id, path or unique name, "" for
a text that fits nothing; plus the examples written in the taxonomy file) first give the index its centre:
their mean embedding is taken off every text and node vector (then made unit again), so the direction every
message of this kind shares (chatty, first person, a question) no longer counts as similarity and a leaf
that moves towards its texts does not draw everyone else's. Then each leaf's vector moves towards the texts
filed under it: the leaf becomes a prototype, its zero-shot vector plus TEXT_WEIGHT times the sum of its
texts' embeddings (a linear head whose rows start at the zero-shot vectors, the zero-shot vector a prior
worth 1 / TEXT_WEIGHT texts; a leaf with none keeps its zero-shot vector). The calibration
(agent_tools/taxonomy_calibration.py) is refitted on held-out predictions of a k-fold cross-validation,
which also gives the held-out accuracy `shoal taxonomy fit` prints (each fold centred on its own training
texts). The result is saved as `<taxonomy>.fit.npz` beside the taxonomy file; a server or `shoal mcp`
serving that taxonomy by name uses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from agent_tools.errors import InvalidInput
from agent_tools.taxonomy_calibration import (
    DEFAULT,
    Calibration,
    expected_calibration_error,
    features,
    fit_logistic,
)
from agent_tools.taxonomy_index import (
    FORMAT,
    TaxonomyIndex,
    build_index,
    centered,
    index_from,
    level_in,
    node_vectors,
    reference_names,
)
from agent_tools.taxonomy_tree import Taxonomy
from agent_tools.taxonomy_tune import Pair, Tuner, adapter_folder

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend

FIT_SUFFIX = ".fit.npz"
TUNE_FOLDS = 3  # a tuned fit trains an adapter per fold: at most this many folds
TEXT_WEIGHT = 0.3  # of each labelled text against a leaf's zero-shot vector; chosen on bench/data/taxonomy/support


def fitted_path(taxonomy_path: Path) -> Path:
    """Where the fitted index of a taxonomy file lives: `shop.yaml` -> `shop.fit.npz`."""
    return taxonomy_path.with_name(taxonomy_path.stem + FIT_SUFFIX)


def resolve_label(t: Taxonomy, label: str) -> int:
    """A node by id, full path or (when unique) name; "" is the root: the text fits nothing."""
    if not label:
        return 0
    if label in t.by_id:
        return t.by_id[label]
    matches = [i for i in range(1, len(t)) if t.names[i] == label]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise KeyError(f"{label!r} names {len(matches)} nodes; use the path, e.g. {t.labels[matches[0]]!r}")
    raise KeyError(f"{label!r} is not a node of the taxonomy")


def read_labelled(path: Path, t: Taxonomy, max_rows: int, max_chars: int) -> list[tuple[str, int]]:
    """(text, node) pairs from a JSONL file, every bad line named: JSON, fields, labels, duplicates, limits."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read labelled file {path}: {e}") from None
    rows: list[tuple[str, int]] = []
    seen: dict[str, int] = {}
    errors: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(rows) >= max_rows:
            raise InvalidInput(
                f"{path}: more than {max_rows:,} labelled texts (SHOAL_TOOLS_MAX_LABELLED_TEXTS); "
                "a sample of a few per node is enough"
            )
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append(f"line {n}: not JSON ({e.msg})")
            continue
        text, label = (obj.get("text"), obj.get("label")) if isinstance(obj, dict) else (None, None)
        if not isinstance(text, str) or not text.strip() or not isinstance(label, str | None):
            errors.append(f'line {n}: expected {{"text": "...", "label": "node id, path or name"}}')
            continue
        if len(text) > max_chars:
            errors.append(f"line {n}: {len(text):,} characters, over {max_chars:,} (SHOAL_TOOLS_MAX_TEXT_CHARS)")
            continue
        key = " ".join(text.split()).casefold()
        if key in seen:
            errors.append(f"line {n}: duplicate text (also line {seen[key]})")
            continue
        seen[key] = n
        try:
            rows.append((text, resolve_label(t, (label or "").strip())))
        except KeyError as e:
            errors.append(f"line {n}: label {e.args[0]}")
        if len(errors) >= 20:
            break
    if errors:
        raise InvalidInput(f"{path}: {len(errors)} bad line(s): " + "; ".join(errors[:20]))
    if not rows:
        raise InvalidInput(f'{path}: no labelled texts (one JSON object per line: {{"text", "label"}})')
    return rows


def taxonomy_examples(t: Taxonomy) -> list[tuple[str, int]]:
    """The examples written in the taxonomy file, as labelled texts of their nodes."""
    return [(x, i) for i in range(1, len(t)) for x in t.examples[i]]


def train_head(base: np.ndarray, leaves: np.ndarray, queries: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Own vectors with each leaf row moved to its prototype: unit(zero-shot row + TEXT_WEIGHT * sum of the
    leaf's labelled texts). targets: positions in `leaves`; base and queries: unit rows in the same (centred)
    space. Measured on the same folds: a softmax-regression head moved a leaf only part of the way towards
    its texts; without the centring, a sum made leaves with more texts draw other leaves' texts."""
    import numpy as np

    sums = np.zeros((leaves.size, base.shape[1]))
    np.add.at(sums, targets, queries.astype(np.float64))
    rows = base[leaves].astype(np.float64) + TEXT_WEIGHT * sums
    out = base.copy()
    out[leaves] = (rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)).astype(np.float32)
    return out


def fit_vectors(
    base: np.ndarray, leaves: np.ndarray, queries: np.ndarray, gold: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(own vectors, centre) fitted to labelled texts: every node and text centred on the texts' mean, then the
    head (`train_head`) over the texts filed under a leaf. base: (nodes, dim) zero-shot own vectors; queries:
    (texts, dim) unit rows; gold: each text's node."""
    import numpy as np

    center = queries.mean(axis=0).astype(np.float32)
    own, texts = centered(base, center), centered(queries, center)
    position = {int(leaf): k for k, leaf in enumerate(leaves)}
    at_leaf = np.isin(gold, leaves)
    targets = np.array([position[int(g)] for g in gold[at_leaf]], dtype=np.int64)
    return train_head(own, leaves, texts[at_leaf], targets), center


def fitted_index(
    t: Taxonomy, model: str, own: np.ndarray, center: np.ndarray, names: np.ndarray, calibration: Calibration
) -> TaxonomyIndex:
    """The index of fitted own vectors and centre, with its score level measured in the centred space."""
    index = index_from(t, model, own, 0.0, calibration, None, center)
    index.level = level_in(index, names)
    return index


class FitReport(TypedDict):
    """What a fit saw and what cross-validation measured (`shoal taxonomy fit` prints it; None: no text to
    measure on)."""

    labelled_texts: int
    leaf_texts: int
    leaves_with_texts: int
    leaves: int
    folds: int
    tuned: bool
    cv_top1_leaf: float | None
    cv_top1_leaf_zero_shot: float | None
    cv_expected_calibration_error: float


class FittedMeta(TypedDict):
    """The JSON saved with the fitted vectors: what they belong to, and the fit's report."""

    format: str
    digest: str
    model: str
    source: str
    report: FitReport
    lora: str | None  # the tuned adapter's folder, relative to the fitted index's folder; None: not tuned
    lora_digest: str | None  # its content digest (engine.catalogue.weights.adapter_digest)


@dataclass
class FitResult:
    """The fitted leaf vectors and calibration, and what cross-validation measured."""

    own: np.ndarray
    center: np.ndarray
    level: float
    calibration: Calibration
    report: FitReport
    lora: str | None = None  # the tuned adapter's folder, when the encoder was tuned

    def index(self, t: Taxonomy, model: str, source: str) -> TaxonomyIndex:
        """The index this fit describes (what `load_fitted` reads back from the saved file), without the
        general topics (`with_outside` adds them)."""
        index = index_from(t, model, self.own, self.level, self.calibration, source, self.center)
        index.lora = self.lora
        return index


Evidence = tuple[float, float, bool]  # one node on a held-out best path: (confidence, d, right)


def ancestors(t: Taxonomy, node: int) -> set[int]:
    return set(t.path(node))


def held_out(index: TaxonomyIndex, queries: np.ndarray, gold: list[int]) -> tuple[list[Evidence], list[int]]:
    """Per text: (mass, d, right) of each node on the best path, and the best leaf (beam search, defaults)."""
    from agent_tools.taxonomy import ClassifyOptions, _answer, run_beam

    identity = Calibration(DEFAULT.k, DEFAULT.m, 1.0, 0.0, 0.0, "identity")
    index.calibration = identity  # confidence = mass, to learn the mapping from it
    opts = ClassifyOptions(threshold=0)
    rows: list[Evidence] = []
    best: list[int] = []
    for q, g in zip(queries, gold, strict=True):
        search = run_beam(index, q, opts)
        answer = _answer(search)
        d = (answer["best_leaf"]["score"] - index.level) / search.stats[1]
        right = ancestors(index.taxonomy, g)
        for level in answer["levels"]:
            node = index.taxonomy.by_id[level["id"]]
            rows.append((level["confidence"], d, node in right))
        best.append(index.taxonomy.by_id[answer["best_leaf"]["id"]])
    return rows, best


@dataclass
class Space:
    """One encoder's view of a taxonomy and its labelled texts: node vectors, the zero-shot score level, the
    reference names' vectors and the texts' vectors (the untuned model, or the model with a tuned adapter)."""

    base: np.ndarray
    level: float
    names: np.ndarray
    queries: np.ndarray


async def embedded(t: Taxonomy, backend: ModelBackend, model: str, texts: list[str]) -> Space:
    """The taxonomy and the texts embedded by `backend` (with its adapter, if it has one)."""
    base = await node_vectors(t, backend, model)
    zero_shot = await build_index(t, backend, model, base)
    names = await reference_names(zero_shot, backend)
    return Space(base, zero_shot.level, names, await backend.embed(model, texts, is_query=True))


def leaf_pairs(t: Taxonomy, labelled: list[tuple[str, int]], rows: np.ndarray) -> list[Pair]:
    """The labelled texts at `rows` that are filed under a leaf, each with its leaf's text (what tuning pulls
    it towards)."""
    return [Pair(labelled[i][0], t.node_text(labelled[i][1]), labelled[i][1]) for i in rows.tolist()
            if labelled[i][1] > 0 and not t.children[labelled[i][1]]]  # fmt: skip


async def fit(
    t: Taxonomy,
    backend: ModelBackend,
    model: str,
    labelled: list[tuple[str, int]],
    folds: int = 5,
    tuner: Tuner | None = None,
) -> FitResult:
    """Cross-validate, fit the calibration on the held-out predictions, then fit the head on everything. With a
    `tuner`, each fold and the final fit first tune an adapter of the model on their texts
    (agent_tools/taxonomy_tune.py) and fit the head in the tuned model's space (at most TUNE_FOLDS folds)."""
    import asyncio

    import numpy as np

    if len(labelled) < 2:
        raise InvalidInput("fitting needs at least 2 labelled texts (the file and the taxonomy's examples together)")
    texts = [x for x, _ in labelled]
    zero = await embedded(t, backend, model, texts)
    gold = np.array([g for _, g in labelled])
    leaves = np.flatnonzero(np.array([not c for c in t.children]) & (np.arange(len(t)) > 0))
    k = max(2, min(folds, gold.size, TUNE_FOLDS if tuner else folds))
    occurrence: dict[int, int] = {}
    first: dict[int, int] = {}
    fold = np.zeros(gold.size, dtype=np.int64)
    for i, g in enumerate(gold.tolist()):
        start = first.setdefault(g, len(first))
        fold[i] = (start + occurrence.get(g, 0)) % k  # a label's texts go to different folds, in turn
        occurrence[g] = occurrence.get(g, 0) + 1

    async def space_for(train: np.ndarray, which: int | None) -> tuple[Space, str | None]:
        """The space a fit on `train` works in (fold `which`; None: the final fit) and its adapter, if tuned."""
        if tuner is None:
            return zero, None
        adapter = await tuner(leaf_pairs(t, labelled, train), which)
        return await embedded(t, backend.with_lora(adapter), model, texts), adapter

    def one_fold(fitted_in: Space | None, f: int) -> tuple[list[Evidence], list[int], list[int]]:
        """Held-out evidence of fold f: of a fit in `fitted_in`, or (None) of the zero-shot index."""
        train, test = fold != f, np.flatnonzero(fold == f)
        if fitted_in is not None:
            space = fitted_in
            own, center = fit_vectors(space.base, leaves, space.queries[train], gold[train])
            index = fitted_index(t, model, own, center, space.names, DEFAULT)
        else:
            space = zero
            index = index_from(t, model, zero.base, zero.level, DEFAULT, None)
        rows, best = held_out(index, space.queries[test], gold[test].tolist())
        return rows, best, test.tolist()

    async def cross_validate(fitted: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows: list[Evidence] = []
        best: list[int] = []
        order: list[int] = []
        for f in range(k):
            space = (await space_for(np.flatnonzero(fold != f), f))[0] if fitted else None
            r, b, o = await asyncio.to_thread(one_fold, space, f)
            rows += r
            best += b
            order += o
        return np.array(rows, dtype=np.float64), np.array(best), np.array(order)

    rows, best, order = await cross_validate(True)
    _, zero_best, zero_order = await cross_validate(False)
    x, y = features(rows[:, 0], rows[:, 1]), rows[:, 2]
    w = fit_logistic(x, y)
    source = f"fitted on {len(labelled)} labelled texts" + (", tuned encoder" if tuner else "")
    calibration = Calibration(DEFAULT.k, DEFAULT.m, float(w[0]), float(w[1]), float(w[2]), source)
    confidence = 1 / (1 + np.exp(-(x @ w)))
    at_leaf = np.isin(gold[order], leaves)
    zero_at_leaf = np.isin(gold[zero_order], leaves)
    final, adapter = await space_for(np.arange(gold.size), None)
    own, center = await asyncio.to_thread(fit_vectors, final.base, leaves, final.queries, gold)
    fitted_level = fitted_index(t, model, own, center, final.names, DEFAULT).level
    report: FitReport = {
        "labelled_texts": len(labelled),
        "leaf_texts": int(np.isin(gold, leaves).sum()),
        "leaves_with_texts": len(set(gold[np.isin(gold, leaves)].tolist())),
        "leaves": int(leaves.size),
        "folds": k,
        "tuned": tuner is not None,
        "cv_top1_leaf": float(np.mean(best[at_leaf] == gold[order][at_leaf])) if at_leaf.any() else None,
        "cv_top1_leaf_zero_shot": float(np.mean(zero_best[zero_at_leaf] == gold[zero_order][zero_at_leaf]))
        if zero_at_leaf.any()
        else None,
        "cv_expected_calibration_error": expected_calibration_error(confidence, y),
    }
    return FitResult(own, center, fitted_level, calibration, report, adapter)


def save_fitted(path: Path, t: Taxonomy, model: str, result: FitResult) -> None:
    """One .npz (no pickles): the leaf vectors, the calibration, the taxonomy digest, the model, the report.
    Saved before its tuned adapter is put beside it (`result.lora` is still where it was trained): a server
    that sees the new index beside the old adapter keeps serving the old pair until the adapter lands."""
    import numpy as np

    from engine.catalogue.weights import adapter_digest

    meta: FittedMeta = {
        "format": FORMAT,
        "digest": t.digest,
        "model": model,
        "source": result.calibration.source,
        "report": result.report,
        "lora": adapter_folder(path).name if result.lora else None,  # where the adapter is put beside it
        "lora_digest": adapter_digest(Path(result.lora)) if result.lora else None,
    }
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(
        tmp,
        own=result.own.astype(np.float32),
        center=result.center.astype(np.float32),
        calibration=np.array(result.calibration.as_list()),
        level=np.array(result.level),
        meta=np.array(json.dumps(meta)),
    )
    tmp.replace(path)
