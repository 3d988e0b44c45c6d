#!/usr/bin/env bash
# Install everything the tests need, then lint, format-check, type-check and run the whole suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy engine shoal pipeline connectors agent_tools
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
