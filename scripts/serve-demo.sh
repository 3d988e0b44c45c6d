#!/usr/bin/env bash
# Install, start `shoal serve` with the embedded engine, and encode a sample over HTTP.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export HF_HUB_OFFLINE=1
PORT=${PORT:-8765}
.venv/bin/shoal serve --port "$PORT" --log-level warning &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.5
done
echo "== shoal models"
.venv/bin/shoal models
echo "== shoal encode over HTTP (first 5 of 384 dims)"
.venv/bin/shoal encode --url "http://127.0.0.1:$PORT" "shoal serves many small models from one engine" \
  "Small task-specific models beat large general ones on narrow tasks" |
  .venv/bin/python -c "import json,sys; [print(json.loads(l)['text'][:50], '->', [round(x, 4) for x in json.loads(l)['dense'][:5]]) for l in sys.stdin]"
