#!/usr/bin/env bash
# Install what the tests need (each step skipped while up to date), then lint, format-check, type-check and
# run the test suite.
#   scripts/test.sh             the full suite (what CI runs)
#   scripts/test.sh --fast      the fast tier: every part of the project in a few minutes (-m "not slow")
# Other arguments go to pytest (scripts/test.sh tests/test_bert_parity.py, scripts/test.sh -m nats).
set -euo pipefail
cd "$(dirname "$0")/.."
FAST=0
if [ "${1:-}" = "--fast" ]; then
  FAST=1
  shift
fi
./scripts/setup.sh --tests
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# numeric tolerances must hold on every CPU kind: say which one this run had
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
features=$(for f in avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_int8; do
  case " $flags " in *" $f "*) printf '%s ' "$f" ;; esac
done)
model=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
echo "test: $(nproc) cores, ${model:-unknown CPU}; features: ${features:-none of avx2/avx512/amx}; load: $(cut -d' ' -f1-3 /proc/loadavg)"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy engine shoal pipeline connectors agent_tools
if [ "$FAST" = 1 ]; then
  exec .venv/bin/python -m pytest -q -p no:cacheprovider -m "not slow" --durations=25 "$@"
fi
# the full suite on every core: pytest-xdist, one worker per core, tests of one file kept on one worker
# (they share module fixtures: servers, stores)
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "$(nproc)" --dist loadfile --durations=25 "$@"
