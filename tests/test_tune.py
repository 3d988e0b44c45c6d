"""Auto-tuned profiles: `shoal tune` writes the best profile per (model, device kind); the next load uses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.residency.manager import ResidencyManager
from engine.residency.tune import ProfileStore, device_kind, synthetic_workload, tune_model
from shoal.cli import app
from tests.helpers import make_tiny_bert


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_tiny_bert(tmp_path_factory.mktemp("tune") / "m", seed=5))


def test_workload_mixes_lengths() -> None:
    seqs = synthetic_workload(100, 512, n=200)
    lengths = sorted(len(s) for s in seqs)
    assert lengths[0] < 32 and lengths[-1] > 256 and all(5 <= t < 100 for s in seqs for t in s)


async def test_tune_stores_profile_and_next_load_uses_it(tiny: str, tmp_path: Path) -> None:
    settings = EngineSettings(profile_store=tmp_path / "profiles.json")
    report = tune_model(tiny, settings, budgets=[64, 128, 256], dtypes=["float32"], requests=24)
    grid = report["grid"]
    # float32 only (precisions and their gate: tests/test_precision.py): each budget once, plausible figures
    assert [(r["dtype"], r["max_batch_tokens"]) for r in grid] == [("float32", b) for b in (64, 128, 256)]
    assert all(r["tokens_per_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] for r in grid)
    # the winner follows the rule: among settings within the latency limit, the smallest budget whose
    # throughput is within 5% of the fastest
    fits = [r for r in grid if r["p99_ms"] <= report["latency_ms"]] or [min(grid, key=lambda r: r["p99_ms"])]
    fastest = max(r["tokens_per_s"] for r in fits)
    near = [r["max_batch_tokens"] for r in fits if r["tokens_per_s"] >= 0.95 * fastest]
    card = Catalogue().get(tiny)
    want = {"max_batch_tokens": min(near), "max_batch_items": card.profile(None).max_batch_items, "dtype": "float32"}
    assert report["profile"] == want and report["model"] == tiny and report["device"] == "cpu"
    stored = ProfileStore(settings.profile_store).get(tiny, device_kind("cpu"))
    assert stored is not None and stored.model_dump(exclude_none=True) == want
    reg = ResidencyManager(Catalogue(), "cpu", True, settings)
    loaded = await reg.get(tiny)
    assert loaded.precision.profile.max_batch_tokens == stored.max_batch_tokens


def test_cli_tune(tiny: str, tmp_path: Path) -> None:
    store = tmp_path / "cli.json"
    cmd = ["tune", tiny, "--budgets", "64,128", "--dtypes", "float32", "--requests", "16", "--store", str(store)]
    cmd.append("--json")
    result = CliRunner().invoke(app, cmd)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["device"] == "cpu" and report["profile"]["max_batch_tokens"] in (64, 128)
    assert f"{tiny}@cpu" in json.loads(store.read_text())


def test_size_flags_parse() -> None:
    s = EngineSettings(device_budget="512MB", host_budget="2GiB")
    assert s.device_budget == 512_000_000 and s.host_budget == 2 * 1024**3
