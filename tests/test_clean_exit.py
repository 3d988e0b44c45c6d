"""A script that never closes its Engine exits cleanly while the first load's precision tune is still running,
and `close()` or a `with` block stops that tune and joins every engine thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SCRIPTS = 20
AT_ONCE = 4
HANG_S = 180  # only a hang fails on time: a healthy script ends in seconds

# The three lines a user writes first, plus one that reports whether the tune was running when the script ended.
SCRIPT = f"""
import shoal
engine = shoal.Engine()
print(engine.encode({MODEL!r}, "hello world")["dense"][:3])
print("TUNING", [m["precision_in_use"]["tuning"] for m in engine.models() if m["name"] == {MODEL!r}][0])
"""


def _run_script(store: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOAL_PROFILE_STORE": str(store), "SHOAL_AUTO_TUNE": "1"}
    env.pop("SHOAL_PRECISION", None)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=HANG_S, check=False
    )


def _recorded(store: Path) -> bool:
    """Whether a tune of MODEL was written to the profile store (keys '<model>@<device kind>')."""
    return store.exists() and any(key.startswith(f"{MODEL}@") for key in json.loads(store.read_text()))


@pytest.mark.slow
def test_scripts_without_close_exit_cleanly_while_auto_tune_runs(tmp_path: Path) -> None:
    stores = [tmp_path / f"profiles-{i}.json" for i in range(SCRIPTS)]
    with ThreadPoolExecutor(AT_ONCE) as pool:
        runs = list(pool.map(_run_script, stores))
    for run, store in zip(runs, stores, strict=True):
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stderr == ""
        assert "TUNING True" in run.stdout, run.stdout  # the tune was mid-flight when the script ended
        assert not _recorded(store)  # stopped, so not recorded


def _engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("shoal-", "asyncio_"))]


@pytest.mark.parametrize("how", ["close", "with"])
def test_close_and_with_stop_the_tune_and_join_every_engine_thread(tmp_path: Path, how: str) -> None:
    import shoal

    before = _engine_threads()
    store = tmp_path / "profiles.json"
    engine = shoal.Engine(profile_store=store, auto_tune=True, precision=None)

    def use() -> None:
        engine.encode(MODEL, "hello world")
        tuning = [m["precision_in_use"]["tuning"] for m in engine.models() if m["name"] == MODEL]
        assert tuning == [True]
        assert _engine_threads() != before

    if how == "with":
        with engine:
            use()
    else:
        use()
        engine.close()
    assert _engine_threads() == before
    assert not _recorded(store)
