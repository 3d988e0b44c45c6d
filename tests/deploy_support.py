"""Test support for deploy/: finding the checking tools, rendering the Helm chart, metric names in PromQL."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO

DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "shoal"
GPU_VALUES = CHART / "ci" / "gpu-values.yaml"
RULE_FILES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))


def tool(name: str) -> str | None:
    """A checking tool: the venv's bin (PyPI packages), the project's tool venv (.venv-tools), else PATH."""
    for folder in (Path(sys.executable).parent, REPO / ".venv-tools" / "bin"):
        if (folder / name).exists():
            return str(folder / name)
    return shutil.which(name)


def need_tool(name: str, how: str) -> str:
    found = tool(name)
    if found is None:
        pytest.skip(f"{name} is not installed ({how}; scripts/setup.sh installs it where it can)")
    return found


def gpu_values() -> dict[str, Any]:
    return yaml.safe_load(GPU_VALUES.read_text())


def render_chart(
    values: dict[str, Any] | None = None, name: str = "rel", namespace: str = "shoal-test"
) -> dict[str, str]:
    """Render the chart offline with Helm's own Go engine (helm-python-sdk); template path -> manifest text."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (PyPI) renders the chart")
    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values or {}, name=name, namespace=namespace)


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object in a render (NOTES.txt left out)."""
    docs = []
    for path, text in sorted(rendered.items()):
        if path.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


# -- metric names in PromQL ----------------------------------------------------------------------------

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
    "inf", "nan", "le", "atan2",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers that are not functions, keywords, label names
    (inside {...} or after by/on/...), strings, durations or Grafana variables."""
    text = re.sub(r'"(?:\\.|[^"\\])*"|`[^`]*`', '""', expr)  # strings
    text = re.sub(r"\$\{?\w+\}?", "1", text)  # Grafana variables ($__rate_interval, ${datasource})
    text = re.sub(r"\{[^{}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, rest = m.group(0), text[m.end() :].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function call or a keyword
        if m.start() > 0 and (text[m.start() - 1].isdigit() or text[m.start() - 1] == "."):
            continue  # the exponent or unit of a number (1e3, 5m)
        names.add(word)
    return names


def dashboard_exprs(path: Path) -> list[str]:
    """Every PromQL query of one dashboard: panel targets and query variables."""
    board = json.loads(path.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", []) if t.get("expr")]
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            exprs.append(m.group(1) if m else query)
    return exprs


def rule_groups(path_or_groups: Path | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(path_or_groups, Path):
        return yaml.safe_load(path_or_groups.read_text())["groups"]
    return path_or_groups


def rule_exprs(groups: list[dict[str, Any]]) -> tuple[list[str], set[str]]:
    """(every expression, the names recording rules define) of a list of rule groups."""
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    return exprs, recorded


def exported_names(metrics_text: str) -> set[str]:
    """The sample names a /metrics page can carry: every family's HELP/TYPE name with its type's suffixes."""
    names = set()
    for line in metrics_text.splitlines():
        m = re.match(r"# TYPE (\S+) (\w+)", line)
        if not m:
            continue
        name, kind = m.groups()
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "counter":
            names |= {name.removesuffix("_total") + "_total"}
    return names
