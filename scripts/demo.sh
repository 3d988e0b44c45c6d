#!/usr/bin/env bash
# Install, then run the main job on the embedded default: ingest examples/docs into ./shoal-data, search it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
DB=${SHOAL_DEMO_DB:-lancedb://./shoal-data}
echo "== shoal ingest examples/docs -> $DB"
status=0
.venv/bin/shoal ingest examples/docs --db "$DB" || status=$?
if [ "$status" -ne 0 ]; then
  echo "ingest exited with $status" >&2
  exit "$status"
fi
for q in "What does error code E-417 mean?" "How much notice is needed to end the lease?" \
  "Which VHF channel does the harbour master monitor?"; do
  echo "== shoal search \"$q\""
  .venv/bin/shoal search "$q" --db "$DB" --top-k 3
done
# shoal is in .venv, not on the PATH: the last line printed is the one that makes the command available
echo
echo "== shoal is installed in .venv, not on the PATH. To use \`shoal\` in this shell (or call $PWD/.venv/bin/shoal):"
echo "source $PWD/.venv/bin/activate"
