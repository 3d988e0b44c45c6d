"""A running `shoal serve --taxonomy` picks up a tuned fit that lands beside its taxonomy, serves a re-tune's
new adapter, and keeps the fit it had when the next one cannot be used (a warning in its log)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from agent_tools.backend import ModelBackend
from agent_tools.config import ToolSettings
from agent_tools.taxonomy.fit import fit, fitted_path, read_labelled, save_fitted, taxonomy_examples
from agent_tools.taxonomy.tree import load_taxonomy
from agent_tools.taxonomy.tune import Pair, TuneOptions, Tuner, adapter_folder, tune_adapter
from tests.helpers import REPO, LiveServer

DATA = REPO / "bench" / "data" / "taxonomy"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BODY = {
    "texts": ["Our sync job keeps getting 429 Too Many Requests", "I was charged twice this month"],
    "taxonomy": "support",
    "threshold": 0,
}


def quick_tuner(work: Path, seed: int) -> Tuner:
    """The CLI's tuner with two passes (the defaults take a minute on this machine; the flow is the same)."""
    from shoal.commands.taxonomy import encoder_of

    encoder = encoder_of(MINILM)

    async def tuner(pairs: list[Pair], fold: int | None) -> str:
        out = work / f"seed-{seed}" / ("all" if fold is None else f"fold-{fold + 1}")
        options = TuneOptions(epochs=2, seed=seed)
        return str(await asyncio.to_thread(tune_adapter, encoder, pairs, out, options))

    return tuner


def land_fit(taxonomy: Path, rows: slice, seed: int, work: Path) -> None:
    """`shoal taxonomy fit TAXONOMY --labelled ... --tune` as the command does it (fit, save, place)."""
    from engine.client.retry import RetryPolicy
    from engine.runtime import AsyncEngine
    from shoal.commands.taxonomy import place_adapter

    labelled = work / f"labelled-{seed}.jsonl"
    labelled.write_text("".join((DATA / "support.jsonl").read_text().splitlines(keepends=True)[rows]))
    t = load_taxonomy(taxonomy)
    texts = taxonomy_examples(t) + read_labelled(labelled, t, 10_000, 10_000)

    async def run() -> None:
        async with AsyncEngine(retry=RetryPolicy()) as engine:
            result = await fit(t, ModelBackend(engine), MINILM, texts, 2, quick_tuner(work, seed))
        target = fitted_path(taxonomy)
        save_fitted(target, t, MINILM, result)
        place_adapter(target, result)

    asyncio.run(run())


def fresh(taxonomy: Path) -> dict[str, Any]:
    """The same call on a server started now (in-process, the adapter allowed by path as `serve` allows it)."""
    from agent_tools.cli import tuned_adapters
    from agent_tools.http import tools_router
    from engine.config import EngineSettings
    from engine.http.app import create_app
    from engine.runtime import AsyncEngine

    tools = ToolSettings(taxonomies={"support": taxonomy})
    engine = AsyncEngine(EngineSettings(local_models=False, lora_folders=tuned_adapters(tools.taxonomies)))
    app = create_app(engine)
    app.include_router(tools_router(engine, tools))
    with TestClient(app) as c:
        r = c.post("/v1/tools/classify_taxonomy", json=BODY)
    assert r.status_code == 200, r.text
    return dict(r.json())


def scores(out: dict[str, Any]) -> list[float]:
    """Each text's best leaf's similarity and confidence: what the adapter and the head decide."""
    return [float(r["best_leaf"][k]) for r in out["results"] for k in ("score", "confidence")]


@pytest.mark.slow
def test_tuned_fits_land_live_and_a_broken_one_keeps_the_last(tmp_path: Path) -> None:
    taxonomy = tmp_path / "served" / "support.yaml"
    taxonomy.parent.mkdir()
    shutil.copy(DATA / "support.yaml", taxonomy)
    log = tmp_path / "serve.log"
    server = LiveServer(args=["--taxonomy", f"support={taxonomy}"], log=log).wait_ready()
    try:

        def call() -> dict[str, Any]:
            r = httpx.post(f"{server.url}/v1/tools/classify_taxonomy", json=BODY, timeout=120)
            assert r.status_code == 200, r.text
            return dict(r.json())

        assert call()["taxonomy"]["fitted"] is False

        land_fit(taxonomy, slice(0, 10), seed=1, work=tmp_path)  # the first tuned fit, while it runs
        first = call()
        assert first["taxonomy"]["fitted"] is True and "tuned encoder" in first["taxonomy"]["calibration"]
        np.testing.assert_allclose(scores(first), scores(fresh(taxonomy)), atol=1e-5)
        mask = os.umask(0o022)
        os.umask(mask)
        for f in adapter_folder(fitted_path(taxonomy)).iterdir():  # written like the rest of the fit
            assert stat.S_IMODE(f.stat().st_mode) == stat.S_IMODE(fitted_path(taxonomy).stat().st_mode)
            assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask

        land_fit(taxonomy, slice(10, 22), seed=2, work=tmp_path)  # a re-tune: same folder, new adapter
        second = call()
        reference = fresh(taxonomy)
        np.testing.assert_allclose(scores(second), scores(reference), atol=1e-5)
        assert [r["label"] for r in second["results"]] == [r["label"] for r in reference["results"]]
        assert max(abs(a - b) for a, b in zip(scores(second), scores(first), strict=True)) > 1e-4

        # an index saved whose adapter has not landed yet (it records another adapter's digest): not used
        with np.load(fitted_path(taxonomy)) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays["meta"]))
        arrays["meta"] = np.array(json.dumps({**meta, "lora_digest": "0" * 64}))
        np.savez(fitted_path(taxonomy).with_name("next.npz"), **arrays)
        fitted_path(taxonomy).with_name("next.npz").replace(fitted_path(taxonomy))
        np.testing.assert_allclose(scores(call()), scores(second), atol=1e-6)
        # and an index that cannot be read at all
        broken = fitted_path(taxonomy).with_name("broken.npz")
        broken.write_bytes(b"not a fitted index")
        broken.replace(fitted_path(taxonomy))
        np.testing.assert_allclose(scores(call()), scores(second), atol=1e-6)
        np.testing.assert_allclose(scores(call()), scores(second), atol=1e-6)
        assert httpx.get(f"{server.url}/healthz").status_code == 200
    finally:
        server.stop()
    warnings = [line for line in log.read_text().splitlines() if "serving the previous one" in line]
    assert len(warnings) == 2, log.read_text()  # one per bad version, not one per call
    assert "another tuned adapter" in warnings[0] and "cannot be read" in warnings[1]
