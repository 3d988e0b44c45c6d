#!/usr/bin/env bash
# Copy the canonical rules and dashboards into the chart (Helm reads files only from inside a chart).
# tests/test_deploy_helm.py fails while the copies differ.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$here/shoal/files/rules" "$here/shoal/files/dashboards"
cp "$here"/../prometheus/rules/*.yml "$here/shoal/files/rules/"
cp "$here"/../grafana/dashboards/*.json "$here/shoal/files/dashboards/"
