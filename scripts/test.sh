#!/usr/bin/env bash
# Install everything the tests need, then lint, format-check, type-check and run the whole suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .
# formatting is checked where it is already applied (engine, SDK, benchmarks, tests of the engine); the
# lead widens this to the whole tree as the other rooms adopt it
.venv/bin/ruff format --check engine shoal bench tests/test_architecture.py tests/residency_support.py tests/task_support.py \
  tests/waiting.py tests/test_bounded.py tests/test_arch_gpu.py tests/test_arch_parity.py \
  tests/test_arch_smollm2.py tests/test_batching.py tests/test_bert_parity.py tests/test_catalogue.py \
  tests/test_compat_clients.py tests/test_gpu.py tests/test_heads_colbert.py \
  tests/test_heads_crossencoder.py tests/test_heads_sparse.py tests/test_lora.py \
  tests/test_nats_cluster.py tests/test_nats_queue.py tests/test_oom.py tests/test_residency.py \
  tests/test_residency_loading.py tests/test_score_api.py tests/test_tune.py
.venv/bin/mypy engine shoal
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
