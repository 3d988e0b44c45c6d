"""The engine's layout is its architecture: no import circles, each room imports only the rooms below it.

Read from the source with `ast` (every import counts: module level, inside functions, under TYPE_CHECKING),
so a circle cannot hide behind a lazy import. docs/architecture.md draws the same rooms and rules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("engine", "shoal", "pipeline", "connectors", "agent_tools", "bench", "tests")

# room -> the rooms it may import (itself always included)
BASE = {"engine.aio", "engine.config", "engine.errors", "engine.metrics", "engine.wire"}
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "arch": set(),
    "catalogue": {"base"},
    "tasks": {"base", "catalogue"},
    "client": {"base", "tasks", "model"},  # model: the tokenizer a caller counts tokens with
    "queue": {"base", "tasks"},
    "model": {"base", "catalogue", "arch"},
    "residency": {"base", "catalogue", "model"},
    "worker": {"base", "catalogue", "tasks", "queue", "model", "residency", "arch"},
    "runtime": {"base", "catalogue", "tasks", "client", "queue", "model", "residency", "worker"},
    "http": {"base", "catalogue", "tasks", "runtime"},
    "build": {"base", "runtime", "http", "client"},
    "cluster": {"base", "build"},
    # the SDK and CLI: public entry points only, never the worker's or the queue's insides
    "shoal": {"base", "catalogue", "client", "runtime", "http", "build", "cluster", "residency"},
}
MAX_LINES = 400
LONG_MODULES: dict[str, str] = {}  # module -> why it may be longer than MAX_LINES (none today)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((REPO / package).rglob("*.py"))}


ENGINE = modules("engine")
SHOAL = modules("shoal")


def room(module: str) -> str:
    if module in BASE or module == "engine":
        return "base"
    parts = module.split(".")
    if parts[0] == "shoal":
        return "shoal"
    return parts[1]  # engine.<room>...; engine.runtime and engine.cluster are rooms of one module


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of ours this file imports, resolved to the module file (`from a import b` where b is a
    module counts as importing a.b)."""
    tree = ast.parse(path.read_text())
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m.split(".")[0] in OURS}


GRAPH = {m: imports(p, {**ENGINE, **SHOAL}) for m, p in {**ENGINE, **SHOAL}.items()}


def test_rooms_are_known() -> None:
    rooms = {room(m) for m in ENGINE}
    assert rooms <= set(ALLOWED), f"modules in rooms with no rules: {rooms - set(ALLOWED)}"


def test_no_import_circles_between_engine_modules() -> None:
    """Tarjan's strongly connected components over the module graph: every component is one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, set()):
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in GRAPH[v]:
                circles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_each_room_imports_only_what_it_may() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        mine = room(module)
        for target in targets:
            if not target.startswith("engine"):
                continue
            theirs = room(target)
            if theirs != mine and theirs not in ALLOWED[mine]:
                wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
    assert not wrong, "imports against the room rules:\n" + "\n".join(sorted(wrong))


def test_engine_imports_nothing_of_ours_outside_itself() -> None:
    outside = sorted(f"{m} imports {t}" for m in ENGINE for t in GRAPH[m] if not t.startswith("engine"))
    assert not outside, outside


ARCH_MAY_IMPORT = ("torch", "flash_attn", "__future__", "pydantic")  # pydantic: the typed config.json classes


def test_libraries_never_import_the_cli_package() -> None:
    """agent_tools, pipeline and connectors sit under `shoal`: they import the engine, never `shoal` itself."""
    wrong = []
    for package in ("agent_tools", "pipeline", "connectors"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                wrong += [f"{path.relative_to(REPO)} imports {n}" for n in names if n.split(".")[0] == "shoal"]
    assert not wrong, wrong


def test_arch_imports_only_torch() -> None:
    """engine/arch: the forward passes, with torch (flash-attn when present), pydantic for the configs they read,
    and the standard library; nothing else of ours."""
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for module, path in ENGINE.items():
        if room(module) != "arch":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                inside = name.split(".")[:2] == ["engine", "arch"]
                if top not in stdlib and top not in ARCH_MAY_IMPORT and not inside:
                    bad.append(f"{module} imports {name}")
    assert not bad, bad


def rooms_table() -> dict[str, str]:
    """docs/architecture.md's rooms table: room -> its row."""
    rows = {}
    for line in (REPO / "docs" / "architecture.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] in ALLOWED:
            rows[cells[0]] = line
    return rows


def test_the_rooms_table_names_every_module_in_its_room() -> None:
    """A reader finds each engine module (arch's families aside) in its own room's row of the table."""
    rows = rooms_table()
    assert set(rows) == set(ALLOWED) - {"shoal"}, f"rooms the table lacks: {set(ALLOWED) - {'shoal'} - set(rows)}"
    missing = []
    for module, path in ENGINE.items():
        mine = room(module)
        if path.name == "__init__.py" or mine == "arch":
            continue
        if f"`{path.name}`" not in rows[mine] and f"{path.parent.name}/{path.name}`" not in rows[mine]:
            missing.append(f"{path.relative_to(REPO)} (room {mine})")
    assert not missing, "name these in docs/architecture.md's rooms table:\n" + "\n".join(sorted(missing))


@pytest.mark.parametrize("module", sorted({**ENGINE, **SHOAL}))
def test_module_is_small_and_says_its_job(module: str) -> None:
    path = {**ENGINE, **SHOAL}[module]
    text = path.read_text()
    assert ast.get_docstring(ast.parse(text)), f"{module} has no docstring saying its job"
    lines = len(text.splitlines())
    assert lines <= MAX_LINES or module in LONG_MODULES, f"{module} has {lines} lines (over {MAX_LINES})"


@pytest.mark.slow
def test_import_shoal_stays_light() -> None:
    """The SDK re-exports resolve on use: importing shoal (or its HTTP client) loads no torch."""
    code = "import sys, shoal; shoal.Client; shoal.AsyncClient; shoal.EngineSettings; shoal.ShoalError\n"
    code += "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


HEAVY = ("torch", "transformers", "lancedb", "pyarrow", "numpy", "pandas", "fastapi", "httpx", "rich")
HELP_CHECK = """
import sys
from shoal.cli import app
import typer.main
names = sorted(typer.main.get_command(app).commands)
for args in [["--help"], *[[name, "--help"] for name in names]]:
    try:
        app(args)
    except SystemExit as e:
        assert e.code == 0, (args, e.code)
print("LOADED", sorted(m for m in HEAVY if m in sys.modules), len(names))
"""


def test_cli_help_stays_light() -> None:
    """`shoal --help` and every `shoal CMD --help` import no torch, no store driver, no numpy or rich."""
    code = f"HEAVY = {HEAVY!r}\n" + HELP_CHECK
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    loaded = out.stdout.strip().splitlines()[-1]
    assert loaded.startswith("LOADED [] "), loaded + out.stderr[-2000:]
    assert int(loaded.split()[-1]) >= 14, "every command was asked for its help"
