"""Taxonomy routing quality against the baselines a user would write, on the same vectors in one run.

Per set (bench/data/taxonomy: five sets written for this project, and HWU64 and SNIPS, public; see
bench/data/NOTICE), with MiniLM embeddings computed once:
- zero-shot: flat cosine to each leaf's "name: description" (the baseline), and `classify_taxonomy`'s
  defaults: top-1 of its answer and of its best leaf, hierarchical F1, leaf texts answered "", no-fit texts
  (fit only a broader node, or nothing) answered with a right broader node or "", ECE of the confidence;
- for k in {1, 3, 5, 10} labelled texts per leaf (rotated, the rest tested, leaves with more than k texts;
  out-of-scope texts of a set: OUT_OF_SCOPE_LABELLED of them labelled "" too): nearest centroid,
  `LogisticRegressionCV` (scikit-learn's defaults, cv at most the texts per leaf; `LogisticRegression()` at
  k = 1, where no stratified folds exist) and `shoal taxonomy fit`
  (agent_tools/taxonomy/fit.py) on the same vectors: best-leaf top-1 and seconds; for the fit also its
  answer's out-of-scope recall, in-scope texts lost to "" and ECE; with --tune, `fit --tune` (a LoRA adapter
  of the encoder per fold and for the final fit, agent_tools/taxonomy/tune.py) at those k.

    .venv/bin/python bench/taxonomy_quality.py [--sets hwu64,snips,...] [--shots 1,3,5,10] [--rotations 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
DATA = ROOT / "bench" / "data" / "taxonomy"
SETS = ("hwu64", "snips", "support", "city", "shop", "research", "bank")
PUBLIC = {"hwu64": "HWU64 (CC BY 4.0)", "snips": "SNIPS 2017 (CC0 1.0)"}
OUT_OF_SCOPE_LABELLED = 20  # "" texts given to the learners (the rest are tested)


def load_set(name: str, folder: Path = DATA, with_history: bool = True) -> tuple[Any, list[str], list[int]]:
    """(taxonomy, texts, gold node per text; 0 = fits nothing); the set's history file's texts (labelled
    texts kept for the k-shot figures, `city` and `shop`) after the set's own unless `with_history` is off."""
    from agent_tools.taxonomy.fit import resolve_label
    from agent_tools.taxonomy.tree import load_taxonomy

    t = load_taxonomy(folder / f"{name}.yaml")
    rows = []
    for path in (folder / f"{name}.jsonl", folder / f"{name}.history.jsonl"):
        if path.exists() and (with_history or not path.name.endswith(".history.jsonl")):
            rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return t, [r["text"] for r in rows], [resolve_label(t, r["label"] or "") for r in rows]


def on_path(t: Any, node: int) -> set[int]:
    return set(t.path(node))


def scores(t: Any, predicted: list[int], best: list[int], gold: list[int], conf: list[float | None]) -> dict[str, Any]:
    """The zero-shot figures of one method on one set."""
    from agent_tools.taxonomy.calibration import expected_calibration_error

    leafy = [g > 0 and not t.children[g] for g in gold]
    leaf_idx = [i for i, x in enumerate(leafy) if x]
    nofit = [i for i, x in enumerate(leafy) if not x]
    overlap = sum(len(on_path(t, p) & on_path(t, g)) for p, g in zip(predicted, gold, strict=True))
    n_pred, n_gold = sum(len(on_path(t, p)) for p in predicted), sum(len(on_path(t, g)) for g in gold)
    precision, recall = overlap / max(n_pred, 1), overlap / max(n_gold, 1)
    answered = [i for i, c in enumerate(conf) if c is not None and predicted[i]]
    right = np.array([predicted[i] in on_path(t, gold[i]) for i in answered], dtype=np.float64)
    return {
        "top1_leaf": float(np.mean([predicted[i] == gold[i] for i in leaf_idx])),
        "best_leaf": float(np.mean([best[i] == gold[i] for i in leaf_idx])),
        "hf1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "leaf_texts_empty": float(np.mean([predicted[i] == 0 for i in leaf_idx])),
        "nofit_ok": float(np.mean([predicted[i] == 0 or predicted[i] in on_path(t, gold[i]) for i in nofit]))
        if nofit
        else None,
        "ece": expected_calibration_error(np.array([conf[i] for i in answered], dtype=np.float64), right)
        if answered
        else None,
    }


def answers(index: Any, queries: np.ndarray) -> tuple[list[int], list[int], list[float | None]]:
    """(answer, best leaf, confidence) per text with the tool's defaults."""
    from agent_tools.taxonomy.options import ClassifyOptions
    from agent_tools.taxonomy.scorer import answer_batch

    out = answer_batch(index, list(queries), ClassifyOptions())
    t = index.taxonomy
    return (
        [t.by_id[a["id"]] if a["id"] else 0 for a in out],
        [t.by_id[a["best_leaf"]["id"]] for a in out],
        [a["confidence"] for a in out],
    )


def splits(gold: list[int], leaves: np.ndarray, k: int, rounds: int) -> list[tuple[list[int], list[int]]]:
    """(train, test) positions: k texts of each leaf with more than k (rotated by k each round), and
    OUT_OF_SCOPE_LABELLED of the "" texts; the rest of those leaves' and "" texts tested."""
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(gold):
        if g == 0 or g in set(leaves.tolist()):
            groups.setdefault(g, []).append(i)
    out = []
    for r in range(rounds):
        train, test = [], []
        for g, ix in groups.items():
            n = OUT_OF_SCOPE_LABELLED if g == 0 else k
            if len(ix) <= n:
                continue
            chosen = {ix[(r * n + j) % len(ix)] for j in range(n)}
            train += sorted(chosen)
            test += [i for i in ix if i not in chosen]
        out.append((train, test))
    return out


def baselines(x: np.ndarray, y: np.ndarray, test: np.ndarray, k: int) -> dict[str, tuple[np.ndarray, float]]:
    """(predicted labels of the test rows, seconds) of nearest centroid and LogisticRegressionCV."""
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV

    out = {}
    start = time.perf_counter()
    classes = np.unique(y)
    centroids = np.stack([x[y == c].mean(axis=0) for c in classes])
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    out["centroid"] = (classes[(test @ centroids.T).argmax(axis=1)], time.perf_counter() - start)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if k > 1:
            model = LogisticRegressionCV(cv=min(5, k), max_iter=1000).fit(x, y)
        else:  # one text per class: no stratified folds; scikit-learn's defaults
            model = LogisticRegression(max_iter=1000).fit(x, y)
    out["logreg_cv"] = (model.predict(test), time.perf_counter() - start)
    return out


async def tuned(backend: Any, t: Any, labelled: list[tuple[str, int]], test_texts: list[str]) -> list[int]:
    """Best leaf per test text of `shoal taxonomy fit --tune` on the labelled texts."""
    import tempfile

    from agent_tools.taxonomy.index import with_outside
    from agent_tools.taxonomy.tune import local_tuner
    from shoal.commands.taxonomy import encoder_of

    with tempfile.TemporaryDirectory() as work:
        from agent_tools.taxonomy.fit import fit

        result = await fit(t, backend, MINILM, labelled, tuner=local_tuner(encoder_of(MINILM), Path(work)))
        own = backend.with_lora(result.lora)
        index = await with_outside(result.index(t, MINILM, "bench"), own)
        queries = await own.embed(MINILM, test_texts, is_query=True)
    return answers(index, queries)[1]


async def shots(
    space: Any, t: Any, texts: list[str], gold: list[int], k: int, rounds: int, backend: Any = None
) -> dict[str, Any] | None:
    """Best-leaf top-1 of the learners at k labelled texts per leaf, on the same vectors (and of a tuned fit
    when a backend is given)."""
    from agent_tools.taxonomy.fit import Space, fit
    from agent_tools.taxonomy.index import index_from

    g = np.array(gold)
    q = space.queries
    right: dict[str, int] = {}
    seconds: dict[str, float] = {}
    oos = {"recall": [], "lost": [], "ece": []}
    total = 0
    for train, test in splits(gold, space.index.leaves, k, rounds):
        tr, te = np.array(train, dtype=np.int64), np.array(test, dtype=np.int64)
        if not te.size:
            return None
        in_scope = te[g[te] > 0]
        if not in_scope.size:
            return None
        for name, (pred, sec) in baselines(q[tr], g[tr], q[in_scope], k).items():
            right[name] = right.get(name, 0) + int((pred == g[in_scope]).sum())
            seconds[name] = seconds.get(name, 0.0) + sec
        start = time.perf_counter()
        labelled = [(texts[i], gold[i]) for i in train]
        result = await fit(t, None, MINILM, labelled, space=Space(space.own, space.index, q[tr]))  # type: ignore[arg-type]
        seconds["fit"] = seconds.get("fit", 0.0) + time.perf_counter() - start
        index = index_from(t, MINILM, space.own, space.index.calibration, "bench", result.head)
        index.outside, index.outside_names = space.index.outside, space.index.outside_names
        predicted, best, conf = answers(index, q[te])
        p, b = np.array(predicted), np.array(best)
        at = g[te] > 0
        right["fit"] = right.get("fit", 0) + int((b[at] == g[te][at]).sum())
        right["fit_answer"] = right.get("fit_answer", 0) + int((p[at] == g[te][at]).sum())
        oos["lost"].append(float(np.mean(p[at] == 0)))
        if (~at).any():
            oos["recall"].append(float(np.mean(p[~at] == 0)))
        if backend is not None:
            start = time.perf_counter()
            tuned_best = await tuned(backend, t, labelled, [texts[i] for i in te[at]])
            seconds["fit_tune"] = seconds.get("fit_tune", 0.0) + time.perf_counter() - start
            right["fit_tune"] = right.get("fit_tune", 0) + int((np.array(tuned_best) == g[te][at]).sum())
        answered = p > 0
        ok = np.array(
            [pp in on_path(t, gg) for pp, gg in zip(p[answered].tolist(), g[te][answered].tolist(), strict=True)]
        )
        from agent_tools.taxonomy.calibration import expected_calibration_error

        oos["ece"].append(expected_calibration_error(np.array(conf, dtype=float)[answered], ok.astype(float)))
        total += int(at.sum())
    return {
        **{name: n / total for name, n in right.items()},
        "seconds": {name: s / rounds for name, s in seconds.items()},
        "texts": total,
        "out_of_scope_recall": float(np.mean(oos["recall"])) if oos["recall"] else None,
        "in_scope_lost": float(np.mean(oos["lost"])),
        "ece": float(np.mean(oos["ece"])),
    }


async def evaluate(
    backend: Any, name: str, shot_counts: list[int], rounds: int, tune_counts: tuple[int, ...] = ()
) -> dict[str, Any]:
    from agent_tools.taxonomy.fit import embedded
    from agent_tools.taxonomy.index import own_text

    t, texts, gold = load_set(name)
    n = len(load_set(name, with_history=False)[1])  # the zero-shot figures: the set's own texts
    start = time.perf_counter()
    space = await embedded(t, backend, MINILM, texts)
    embed_seconds = time.perf_counter() - start
    index, queries = space.index, space.queries
    leaves = index.leaves
    flat_vectors = await backend.embed(MINILM, [own_text(t, int(i)) for i in leaves])
    flat = [int(leaves[j]) for j in np.argmax(queries[:n] @ flat_vectors.T, axis=1)]
    predicted, best, conf = answers(index, queries[:n])
    row: dict[str, Any] = {
        "set": name,
        "source": PUBLIC.get(name, "written for this project"),
        "nodes": len(t) - 1,
        "leaves": int(leaves.size),
        "texts": n,
        "labelled_pool": len(texts),
        "out_of_scope": sum(1 for g in gold[:n] if g == 0),
        "embed_seconds": embed_seconds,
        "temperature": index.calibration.temperature,
        "flat": scores(t, flat, flat, gold[:n], [None] * len(flat)),
        "tool": scores(t, predicted, best, gold[:n], conf),
        "shots": {
            str(k): await shots(space, t, texts, gold, k, rounds, backend if k in tune_counts else None)
            for k in shot_counts
        },
    }
    return row


async def run(
    sets: list[str], shot_counts: list[int], rounds: int, tune_counts: tuple[int, ...] = ()
) -> list[dict[str, Any]]:
    from agent_tools.backend import ModelBackend
    from bench import float32_settings
    from engine.runtime import AsyncEngine

    async with AsyncEngine(float32_settings()) as engine:
        backend = ModelBackend(engine)
        rows = []
        for name in sets:
            rows.append(await evaluate(backend, name, shot_counts, rounds, tune_counts))
            report(rows[-1:])
        return rows


def report(rows: list[dict[str, Any]]) -> None:
    def f(x: float | None) -> str:
        return "  -  " if x is None else f"{x:.3f}"

    for r in rows:
        print(f"== {r['set']} ({r['source']}): {r['nodes']} nodes, {r['leaves']} leaves, {r['texts']} texts, "
              f"{r['out_of_scope']} out of scope; temperature {r['temperature']:.4f}")  # fmt: skip
        print("   method  top-1 answer  best leaf   hF1   leaf->''  no-fit ok   ECE")
        for method in ("flat", "tool"):
            m = r[method]
            print(
                f"   {method:<6}  {f(m['top1_leaf']):>11}  {f(m['best_leaf']):>9}  {f(m['hf1'])}"
                f"  {f(m['leaf_texts_empty']):>8}  {f(m['nofit_ok']):>9}  {f(m['ece'])}"
            )
        for k, v in r["shots"].items():
            if v is None:
                continue
            s = v["seconds"]
            print(
                f"   k={k:>2}: centroid {f(v['centroid'])} ({s['centroid']:.2f} s), LogisticRegressionCV"
                f" {f(v['logreg_cv'])} ({s['logreg_cv']:.1f} s), fit {f(v['fit'])} ({s['fit']:.1f} s; answer"
                f" {f(v['fit_answer'])}{tune_note(v)}, out-of-scope recall {f(v['out_of_scope_recall'])}, in-scope to ''"
                f" {f(v['in_scope_lost'])}, ECE {f(v['ece'])}) on {v['texts']} texts"
            )


def tune_note(v: dict[str, Any]) -> str:
    if "fit_tune" not in v:
        return ""
    return f"; fit --tune {v['fit_tune']:.3f} in {v['seconds']['fit_tune']:.0f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--shots", default="1,3,5,10")
    ap.add_argument("--rotations", type=int, default=1)
    ap.add_argument("--tune", default="", help="k values at which `fit --tune` is measured too, e.g. 5,10")
    args = ap.parse_args()
    tune = tuple(int(k) for k in args.tune.split(",") if k)
    shot_counts = sorted({int(k) for k in args.shots.split(",") if k} | set(tune))
    rows = asyncio.run(run(args.sets.split(","), shot_counts, args.rotations, tune))
    out = ROOT / "bench" / "results" / "taxonomy_quality.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
