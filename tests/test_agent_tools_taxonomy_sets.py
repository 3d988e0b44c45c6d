"""Taxonomy routing on the labelled sets written for this project (bench/data/taxonomy), MiniLM, against the
baselines of the same run: the tool's best leaf at flat's top-1 and its answered hierarchical F1 not below
flat's, few leaf texts answered "", and the fit at one labelled text per leaf not below logistic regression
on the same vectors (and above zero-shot); `fit --tune` against `fit` on one set."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bench.taxonomy_quality import evaluate

HELD_OUT = ("city", "shop", "research", "bank")


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    from agent_tools.backend import ModelBackend
    from engine.runtime import AsyncEngine

    async def run() -> list[dict[str, Any]]:
        async with AsyncEngine() as engine:
            return [await evaluate(ModelBackend(engine), name, [1], 1) for name in HELD_OUT]

    return asyncio.run(run())


@pytest.mark.slow
def test_zero_shot_never_below_flat_on_the_written_sets(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        flat, tool = r["flat"], r["tool"]
        print(f"\n{r['set']}: flat {flat}\n  tool {tool}\n  shots {r['shots']}")
        assert r["leaves"] >= 100
        assert tool["best_leaf"] >= flat["top1_leaf"] - 0.01  # the tool's leaf text adds the path to the name
        assert tool["hf1"] >= flat["hf1"] - 0.005  # a step-up must earn what it costs
        assert tool["leaf_texts_empty"] <= 0.03


@pytest.mark.slow
def test_one_labelled_text_per_leaf_fit_against_logistic_regression(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        one = r["shots"]["1"]
        assert one is not None
        assert one["fit"] >= one["logreg_cv"] - 0.01 and one["fit"] >= one["centroid"] - 0.01
        assert one["fit"] >= r["tool"]["best_leaf"] - 0.05  # the labelled texts are other texts than zero-shot's


@pytest.mark.slow
def test_tuning_the_encoder_is_not_below_the_fit() -> None:
    """`fit --tune` against `fit` with three labelled texts per leaf on SNIPS (one rotation)."""
    from agent_tools.backend import ModelBackend
    from engine.runtime import AsyncEngine

    async def run() -> dict[str, Any]:
        async with AsyncEngine() as engine:
            return await evaluate(ModelBackend(engine), "snips", [3], 1, (3,))

    three = asyncio.run(run())["shots"]["3"]
    print(f"\nsnips, 3 labelled texts per leaf: {three}")
    assert three["fit_tune"] >= three["fit"] - 0.01
