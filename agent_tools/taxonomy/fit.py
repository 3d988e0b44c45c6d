"""Fit a taxonomy's routing to labelled texts: logistic regression on the encoder's vectors, mixed with the
zero-shot scores, calibrated.

The labelled texts (a JSONL file of `{"text", "label"}`, the label a node's id, path or unique name, "" for
a text that fits nothing; plus the examples written in the taxonomy file) train a multinomial logistic
regression (scikit-learn) over the leaves that have texts, and a `""` class when some texts fit nothing.
Its regularisation, the weight of the zero-shot logits mixed into it (a prior that also scores the leaves
without texts) and the bias of those leaves are chosen together by cross-validation on the held-out top-1;
the scale of the mixed logits (the calibration) then by the held-out log-loss. The same folds give the
held-out figures `shoal taxonomy fit` prints. The result is saved as `<taxonomy>.fit.npz` beside the
taxonomy file; a server or `shoal mcp` serving that taxonomy by name uses it (agent_tools/taxonomy/scorer.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from agent_tools.errors import InvalidInput
from agent_tools.taxonomy.calibration import Calibration, best_scale, expected_calibration_error, subtree_nll
from agent_tools.taxonomy.head import Head
from agent_tools.taxonomy.index import FORMAT, TaxonomyIndex, build_index, index_from, node_vectors
from agent_tools.taxonomy.options import ClassifyOptions
from agent_tools.taxonomy.scorer import NEVER, decide, mix
from agent_tools.taxonomy.tree import Taxonomy
from agent_tools.taxonomy.tune import Pair, Tuner, adapter_folder

if TYPE_CHECKING:
    import numpy as np

    from agent_tools.backend import ModelBackend

FIT_SUFFIX = ".fit.npz"
FOLDS = 5  # cross-validation folds, as LogisticRegressionCV (a tuned fit: at most TUNE_FOLDS)
TUNE_FOLDS = 3  # a tuned fit trains an adapter per fold
REGULARISATION = (0.36, 2.78, 21.5, 167.0, 1292.0, 10000.0)  # inverse L2 strengths: LogisticRegressionCV's upper six
PRIORS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 32.0)  # weights of the zero-shot logits tried (32: about zero-shot)
SCALES = (0.001, 20.0, 80)  # geometric grid (low, high, points) of the calibration's logit multiplier


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


class FitReport(TypedDict):
    """What a fit saw and what cross-validation measured (`shoal taxonomy fit` prints it; None: no text to
    measure on)."""

    labelled_texts: int
    leaf_texts: int
    out_of_scope_texts: int
    leaves_with_texts: int
    leaves: int
    folds: int
    tuned: bool
    regularisation: float
    prior_weight: float
    cv_top1_leaf: float | None
    cv_top1_leaf_zero_shot: float | None
    cv_out_of_scope_recall: float | None
    cv_leaf_texts_answered_empty: float | None
    cv_expected_calibration_error: float


class FittedMeta(TypedDict):
    """The JSON saved with the fitted head: what it belongs to, and the fit's report."""

    format: str
    digest: str
    model: str
    source: str
    report: FitReport
    lora: str | None  # the tuned adapter's folder, relative to the fitted index's folder; None: not tuned
    lora_digest: str | None  # its content digest (engine.catalogue.weights.adapter_digest)


@dataclass
class FitResult:
    """The node vectors the head was fitted with, the zero-shot calibration, the head and the report."""

    own: np.ndarray
    calibration: Calibration
    head: Head
    report: FitReport
    lora: str | None = None  # the tuned adapter's folder, when the encoder was tuned

    def index(self, t: Taxonomy, model: str, source: str) -> TaxonomyIndex:
        """The index this fit describes (what `load_fitted` reads back), without the general topics
        (`with_outside` adds them)."""
        index = index_from(t, model, self.own, self.calibration, source, self.head)
        index.lora = self.lora
        return index


@dataclass
class Space:
    """One encoder's view of a taxonomy and its labelled texts: own node vectors, the zero-shot index (its
    measured temperature and outside topics) and the texts' vectors."""

    own: np.ndarray
    index: TaxonomyIndex
    queries: np.ndarray

    def zero(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(zero-shot leaf logits, outside-topic "fits nothing" logits) of the texts at rows."""
        import numpy as np

        ix, q = self.index, self.queries[rows]
        temperature = ix.calibration.temperature
        none = np.full(rows.size, NEVER)
        if ix.outside is not None and len(ix.outside):
            none = (q @ ix.outside.T).max(axis=1) / temperature - ix.calibration.none_bias
        return q @ ix.vectors[ix.leaves].T / temperature, none


async def embedded(t: Taxonomy, backend: ModelBackend, model: str, texts: list[str]) -> Space:
    """The taxonomy and the texts embedded by `backend` (with its adapter, if it has one)."""
    own = await node_vectors(t, backend, model)
    index = await build_index(t, backend, model, own)
    return Space(own, index, await backend.embed(model, texts, is_query=True))


def leaf_pairs(t: Taxonomy, labelled: list[tuple[str, int]], rows: np.ndarray) -> list[Pair]:
    """The labelled texts at `rows` that are filed under a leaf, each with its leaf's text (what tuning pulls
    it towards)."""
    return [Pair(labelled[i][0], t.node_text(labelled[i][1]), labelled[i][1]) for i in rows.tolist()
            if labelled[i][1] > 0 and not t.children[labelled[i][1]]]  # fmt: skip


def folds_of(gold: np.ndarray, k: int) -> np.ndarray:
    """Each text's fold: a label's texts go to different folds, in turn, starting where the last label left."""
    import numpy as np

    fold = np.zeros(gold.size, dtype=np.int64)
    first: dict[int, int] = {}
    count: dict[int, int] = {}
    for i, g in enumerate(gold.tolist()):
        start = first.setdefault(g, len(first))
        fold[i] = (start + count.get(g, 0)) % k
        count[g] = count.get(g, 0) + 1
    return fold


@dataclass
class Learned:
    """Held-out (or final) learned logits: rows of texts, one column per class the model saw."""

    logits: np.ndarray
    classes: np.ndarray  # node of each column; 0: fits nothing


def learner(c: float) -> object:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=1000, tol=1e-4, warm_start=True)


def one_thread() -> object:
    """BLAS on one thread: these problems are small, and a threaded BLAS on a busy CPU makes each of the
    solver's many small products wait for its threads (measured 50x slower on two shared cores)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


def learn_path(x: np.ndarray, y: np.ndarray, test: np.ndarray) -> list[Learned]:
    """Logistic regressions along REGULARISATION (each warm-started from the last) on (x, y): the learned
    logits of the `test` rows for each strength. A single class learns nothing (empty columns)."""
    import warnings

    import numpy as np

    classes = np.unique(y)
    if classes.size < 2:
        return [Learned(np.zeros((test.shape[0], 0)), np.zeros(0, dtype=np.int64)) for _ in REGULARISATION]
    model = learner(REGULARISATION[0])
    out = []
    for c in REGULARISATION:
        model.set_params(C=c)  # type: ignore[attr-defined]
        with warnings.catch_warnings(), one_thread():  # type: ignore[attr-defined]
            warnings.simplefilter("ignore")  # convergence at a few hundred iterations is close enough
            model.fit(x, y)  # type: ignore[attr-defined]
        scores = model.decision_function(test)  # type: ignore[attr-defined]
        if classes.size == 2:  # binary: one column, for the second class
            scores = np.stack([-scores / 2, scores / 2], axis=1)
        out.append(Learned(scores, classes))
    return out


def combined(
    zero: np.ndarray, none_zero: np.ndarray, learned: Learned, leaves: np.ndarray, prior: float, unseen: float
) -> np.ndarray:
    """(texts, leaves + 1) logits, the last column "fits nothing", as the scorer computes them (unscaled)."""
    import numpy as np

    seen = learned.classes > 0
    columns = np.searchsorted(leaves, learned.classes[seen])
    leaf_logits = mix(zero, learned.logits[:, seen], columns, prior, unseen)
    if (~seen).any():
        none = learned.logits[:, int(np.flatnonzero(~seen)[0])]
    else:
        none = np.where((none_zero > NEVER / 2) & (prior > 0), prior * none_zero, NEVER)
    return np.concatenate([leaf_logits, none[:, None]], axis=1)


def unseen_biases(learned: list[Learned]) -> list[float]:
    """Candidate biases of the leaves without texts: quartiles of the learned logits, and never."""
    import numpy as np

    values = np.concatenate([x.logits.ravel() for x in learned if x.logits.size] or [np.zeros(1)])
    return [*np.quantile(values, [0.25, 0.5, 0.75, 0.95]).tolist(), NEVER]


def targets_of(gold: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """Each text's column among leaves + "fits nothing" (the last)."""
    import numpy as np

    return np.where(gold == 0, leaves.size, np.searchsorted(leaves, gold))


async def fit(
    t: Taxonomy,
    backend: ModelBackend,
    model: str,
    labelled: list[tuple[str, int]],
    folds: int = FOLDS,
    tuner: Tuner | None = None,
    space: Space | None = None,
) -> FitResult:
    """Cross-validate the head's settings on held-out folds, then fit it on every text. With a `tuner`, each
    fold and the final fit first tune an adapter of the model on their texts (agent_tools/taxonomy/tune.py)
    and fit the head in the tuned model's space. `space`: the taxonomy and these texts embedded already."""
    import asyncio

    import numpy as np

    if len(labelled) < 2:
        raise InvalidInput("fitting needs at least 2 labelled texts (the file and the taxonomy's examples together)")
    texts = [x for x, _ in labelled]
    zero_space = space if space is not None else await embedded(t, backend, model, texts)
    leaves = zero_space.index.leaves
    gold = np.array([g for _, g in labelled])
    usable = np.flatnonzero((gold == 0) | np.isin(gold, leaves))  # texts filed under an inner node: not learned
    if usable.size < 2:
        raise InvalidInput('fitting needs at least 2 labelled texts filed under leaves (or "")')
    gold = gold[usable]
    k = max(2, min(folds, gold.size, TUNE_FOLDS if tuner else folds))
    fold = folds_of(gold, k)

    async def space_for(train: np.ndarray, which: int | None) -> tuple[Space, str | None]:
        if tuner is None:
            return zero_space, None
        adapter = await tuner(leaf_pairs(t, labelled, usable[train]), which)
        return await embedded(t, backend.with_lora(adapter), model, texts), adapter

    held: list[tuple[np.ndarray, np.ndarray, np.ndarray, list[Learned], Space]] = []
    for f in range(k):
        train, test = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
        space, _ = await space_for(train, f)
        x = space.queries[usable]
        path = await asyncio.to_thread(learn_path, x[train], gold[train], x[test])
        zero, none_zero = space.zero(usable[test])
        held.append((test, zero, none_zero, path, space))

    target = targets_of(gold, leaves)
    order = np.concatenate([h[0] for h in held])
    onehot = np.zeros((order.size, leaves.size + 1), dtype=bool)
    onehot[np.arange(order.size), target[order]] = True

    def held_logits(ci: int, prior: float, unseen: float) -> np.ndarray:
        return np.concatenate([combined(z, nz, p[ci], leaves, prior, unseen) for _, z, nz, p, _ in held])

    def right(logits: np.ndarray) -> float:
        return float(np.mean(logits.argmax(axis=1) == target[order]))

    # as LogisticRegressionCV: the strength by held-out accuracy of the regression alone (ties: the stronger)
    # on the texts whose label its fold saw, then the prior's weight and the unseen leaves' bias at that
    # strength (ties: the lighter prior); when most labels have too few texts for that, all three together
    seen = np.concatenate([np.isin(gold[h[0]], h[3][0].classes) for h in held])
    strengths = range(len(REGULARISATION))
    if seen.mean() >= 0.5:

        def alone(c: int) -> float:
            return float(np.mean(held_logits(c, 0.0, NEVER)[seen].argmax(axis=1) == target[order][seen]))

        best = max(strengths, key=lambda c: (alone(c), -c))
        strengths = range(best, best + 1)
    candidates = [(c, w, u) for c in strengths for w in PRIORS for u in unseen_biases([h[3][c] for h in held])]

    def key(k: int) -> tuple[float, int, float]:
        logits = held_logits(*candidates[k])
        return right(logits), -k, -subtree_nll(logits * 0.1, onehot)

    ci, prior, unseen = candidates[max(range(len(candidates)), key=key)]
    logits = held_logits(ci, prior, unseen)
    low, high, points = SCALES
    scale = best_scale(logits, onehot, np.geomspace(low, high, points))
    report_cv = held_out_figures(zero_space.index, logits * scale, gold[order], held)

    final, adapter = await space_for(np.arange(gold.size), None)
    x = final.queries[usable]
    learned = (await asyncio.to_thread(learn_path, x, gold, x[:1]))[ci]
    head = final_head(x, gold, learned, ci, prior, unseen, scale)
    report: FitReport = {
        "labelled_texts": len(labelled),
        "leaf_texts": int((gold > 0).sum()),
        "out_of_scope_texts": int((gold == 0).sum()),
        "leaves_with_texts": len(set(gold[gold > 0].tolist())),
        "leaves": int(leaves.size),
        "folds": k,
        "tuned": tuner is not None,
        "regularisation": REGULARISATION[ci],
        "prior_weight": prior,
        **report_cv,  # type: ignore[typeddict-item]
    }
    return FitResult(final.own, final.index.calibration, head, report, adapter)


def final_head(
    x: np.ndarray, gold: np.ndarray, learned: Learned, ci: int, prior: float, unseen: float, scale: float
) -> Head:
    """The head fitted on every text at the chosen strength."""
    import warnings

    import numpy as np

    classes = np.unique(gold)
    if classes.size < 2:
        dim = x.shape[1]
        return Head(np.zeros((0, dim), np.float32), np.zeros(0), np.zeros(0, np.int64), prior, unseen, scale)
    model = learner(REGULARISATION[ci])
    with warnings.catch_warnings(), one_thread():  # type: ignore[attr-defined]
        warnings.simplefilter("ignore")
        model.fit(x, gold)  # type: ignore[attr-defined]
    coef, intercept = model.coef_, model.intercept_  # type: ignore[attr-defined]
    if classes.size == 2:  # binary: one row for the second class
        coef = np.concatenate([-coef / 2, coef / 2])
        intercept = np.concatenate([-intercept / 2, intercept / 2])
    return Head(coef.astype(np.float32), intercept.astype(np.float64), classes.astype(np.int64), prior, unseen, scale)


def held_out_figures(
    index: TaxonomyIndex,
    logits: np.ndarray,
    gold: np.ndarray,
    held: list[tuple[np.ndarray, np.ndarray, np.ndarray, list[Learned], Space]],
) -> dict[str, float | None]:
    """Held-out top-1, out-of-scope recall, leaf texts answered "" and ECE of the default answers."""
    import numpy as np

    t = index.taxonomy
    opts = ClassifyOptions()
    zero = np.concatenate([h[1] for h in held])
    sims = np.zeros(len(t))
    answers = [decide(index, sims, row[:-1], float(row[-1]), opts) for row in logits]
    chosen = np.array([t.by_id[a["id"]] if a["id"] else 0 for a in answers])
    best = index.leaves[logits[:, :-1].argmax(axis=1)]
    at_leaf, outside = gold > 0, gold == 0
    conf = np.array([a["confidence"] or 0.0 for a in answers])
    right = np.array([c == 0 or c in t.path(g) for c, g in zip(chosen.tolist(), gold.tolist(), strict=True)])
    answered = chosen > 0
    return {
        "cv_top1_leaf": float(np.mean(best[at_leaf] == gold[at_leaf])) if at_leaf.any() else None,
        "cv_top1_leaf_zero_shot": float(np.mean(index.leaves[zero.argmax(axis=1)][at_leaf] == gold[at_leaf]))
        if at_leaf.any()
        else None,
        "cv_out_of_scope_recall": float(np.mean(chosen[outside] == 0)) if outside.any() else None,
        "cv_leaf_texts_answered_empty": float(np.mean(chosen[at_leaf] == 0)) if at_leaf.any() else None,
        "cv_expected_calibration_error": expected_calibration_error(conf[answered], right[answered].astype(float)),
    }


def save_fitted(path: Path, t: Taxonomy, model: str, result: FitResult) -> None:
    """One .npz (no pickles): the node vectors, the head, the temperature, the taxonomy digest, the report.
    Saved before its tuned adapter is put beside it (`result.lora` is still where it was trained): a server
    that sees the new index beside the old adapter keeps serving the old pair until the adapter lands."""
    import numpy as np

    from engine.catalogue.weights import adapter_digest

    meta: FittedMeta = {
        "format": FORMAT,
        "digest": t.digest,
        "model": model,
        "source": f"fitted on {result.report['labelled_texts']} labelled texts"
        + (", tuned encoder" if result.lora else ""),
        "report": result.report,
        "lora": adapter_folder(path).name if result.lora else None,  # where the adapter is put beside it
        "lora_digest": adapter_digest(Path(result.lora)) if result.lora else None,
    }
    head = result.head
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(
        tmp,
        own=result.own.astype(np.float32),
        calibration=np.array([result.calibration.temperature, result.calibration.none_bias]),
        coef=head.coef.astype(np.float32),
        intercept=head.intercept.astype(np.float64),
        classes=head.classes.astype(np.int64),
        mix=np.array([head.prior, head.unseen, head.scale]),
        meta=np.array(json.dumps(meta)),
    )
    tmp.replace(path)
