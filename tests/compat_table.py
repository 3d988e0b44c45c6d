"""Render docs/compatibility.md's client table from the compatibility suite's results.

Run the suite (`pytest -m compat`), then `python -m tests.compat_table`: the rows between the markers are
rewritten from .cache/compat/results.json (one row per `record(client, calls)` that passed; a call the
suite covers but that did not pass is written as `not run`). tests/test_compat_table.py checks that the
table lists exactly what the suite covers, at the pinned versions.
"""

from __future__ import annotations

import ast
import json
import re

from tests.compat_venvs import CLIENTS, REPO

DOC = REPO / "docs" / "compatibility.md"
RESULTS = REPO / ".cache" / "compat" / "results.json"
BEGIN, END = "<!-- compat-table:begin -->", "<!-- compat-table:end -->"
VENV_OF = {"sie-sdk": "sie", "sie-langchain": "sie", "sie-llamaindex": "sie"}


def covered() -> list[tuple[str, str]]:
    """(client, calls) of every `record(...)` in the compat test modules, in file order."""
    rows = []
    for path in sorted((REPO / "tests").glob("test_compat_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "record":
                client, calls = (a.value for a in node.args if isinstance(a, ast.Constant))
                rows.append((str(client), str(calls)))
    return rows


def pinned(client: str) -> str:
    """The version the suite's venv pins for a client package."""
    name = "huggingface_hub" if client == "huggingface-hub" else client
    for req in CLIENTS[VENV_OF.get(client, client)]:
        if req.split("==")[0] == name:
            return req.split("==")[1]
    return ""


def render(results: dict[str, dict[str, str]]) -> str:
    lines = ["| client | version | calls | status |", "| --- | --- | --- | --- |"]
    for client, calls in covered():
        status = results.get(f"{client}|{calls}", {}).get("status", "not run")
        lines.append(f"| {client} | {pinned(client)} | {calls} | {status} |")
    return "\n".join(lines)


def table_rows(text: str) -> list[list[str]]:
    block = text.split(BEGIN)[1].split(END)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.strip().splitlines()[2:]]


def main() -> None:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    text = DOC.read_text()
    new = re.sub(f"{BEGIN}.*?{END}", f"{BEGIN}\n{render(results)}\n{END}", text, flags=re.S)
    DOC.write_text(new)
    print(render(results))


if __name__ == "__main__":
    main()
