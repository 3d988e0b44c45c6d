"""bench/gpu.py, the one-run GPU benchmark, run on the CPU with small random models so it keeps working where
no GPU is lent: every section's figures, and one section's failure leaving the others'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def run_bench(out: Path, *args: str) -> dict:
    cmd = [sys.executable, str(ROOT / "bench" / "gpu.py"), "--device", "cpu", "--tiny", "--rounds", "1"]
    cmd += ["--passages", "24", "--extract-texts", "8", "--out", str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict = json.loads(out.read_text())
    return result


def test_every_section_gives_its_figures(tmp_path: Path) -> None:
    r = run_bench(tmp_path / "gpu.json")
    for section in ("encode", "resident", "extract"):
        assert "error" not in r[section], r[section].get("error")
    encode = r["encode"]
    assert set(encode["systems"]) == {"st:float32", "shoal:float32", "shoal:bfloat16", "shoal:default"} or (
        set(encode["systems"]) == {"st:float32", "shoal:float32", "shoal:default"}  # a CPU without fast bf16
    )
    fp32 = encode["systems"]["shoal:float32"]
    assert fp32["min_cos_to_st_fp32"] > 0.9999  # the same weights in float32: the same vectors
    assert encode["systems"]["shoal:default"]["precision"] in encode["peaks_gflops"]
    for row in encode["systems"].values():
        assert row["passages_per_s"] > 0 and 0 < row["of_peak"] < 10
    resident = r["resident"]
    assert set(resident["models"]) <= set(resident["resident_after"])  # all three held at once
    assert all(v > 0 for v in [*resident["alone_items_per_s"].values(), *resident["together_items_per_s"].values()])
    assert set(r["extract"]["texts_per_s_by_callers"]) == {"1", "8", "32"}
    assert all(v > 0 for v in r["extract"]["texts_per_s_by_callers"].values())


def test_a_failing_section_leaves_the_others(tmp_path: Path) -> None:
    r = run_bench(tmp_path / "gpu.json", "--sections", "encode,extract", "--model-dir", str(tmp_path / "missing"))
    assert "Traceback" in r["encode"]["error"]
    assert "error" not in r["extract"] and r["extract"]["texts_per_s_by_callers"]["1"] > 0
