"""docs/ ships the reference pages the README points at, docs/configuration.md lists every setting of the
engine, the ingest pipeline and the agent tools (a new setting without a line there fails here), every CLI
option a page names exists, and every section of the README and docs/ starts with a sentence."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent_tools.config import ToolSettings
from engine.config import EngineSettings
from pipeline.config import ChunkConfig, EngineConfig, PipelineConfig, SourceConfig, Step
from tests.helpers import REPO

DOCS = REPO / "docs"


def test_reference_pages_exist() -> None:
    for name in ("http-api.md", "configuration.md", "architecture.md", "deployment.md", "troubleshooting.md"):
        assert (DOCS / name).is_file(), name
    assert "## Missing weights" in (DOCS / "troubleshooting.md").read_text()


def test_configuration_lists_every_setting() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [f"SHOAL_{n.upper()}" for n in EngineSettings.model_fields if f"`SHOAL_{n.upper()}`" not in text]
    missing += [
        f"SHOAL_TOOLS_{n.upper()}" for n in ToolSettings.model_fields if f"`SHOAL_TOOLS_{n.upper()}`" not in text
    ]
    nested: list[tuple[type[BaseModel], str]] = [
        (PipelineConfig, ""), (SourceConfig, "source."), (ChunkConfig, "chunking."), (Step, "steps[]."),
        (EngineConfig, "engine."),
    ]  # fmt: skip
    for cls, prefix in nested:
        for name in cls.model_fields:
            if name in ("source", "chunking", "steps", "engine"):
                continue  # sections: their keys are listed one by one
            if f"`{prefix}{name}`" not in text:
                missing.append(prefix + name)
    assert not missing, f"settings missing from docs/configuration.md: {missing}"


def test_http_reference_names_every_route() -> None:
    """Each route of the app (and the ones `shoal serve` mounts) is in http-api.md, or compatibility.md for the
    routes other clients' SDKs call."""
    from agent_tools.http import tools_router
    from engine.http.app import create_app
    from engine.runtime import AsyncEngine
    from pipeline.http import search_router

    engine = AsyncEngine()
    app = create_app(engine)
    app.include_router(tools_router(engine))
    app.include_router(search_router(engine, "lancedb://./nowhere"))
    text = (DOCS / "http-api.md").read_text() + (DOCS / "compatibility.md").read_text()
    paths = {getattr(r, "path", "") for r in app.routes} - {"/openapi.json", "/docs/assets/{name}", "/console"}
    paths = {p.replace("{model:path}", "{model}").replace("{name:path}", "{name}") for p in paths}
    missing = sorted(p for p in paths if p and p not in text)
    assert not missing, f"routes missing from docs/http-api.md: {missing}"


def test_http_reference_explains_every_error_code() -> None:
    """Every error code the engine can answer with has a row in the error table, with its HTTP status."""
    import engine.errors

    table = [line for line in (DOCS / "http-api.md").read_text().splitlines() if line.startswith("| `")]
    missing = []
    for cls in vars(engine.errors).values():
        if isinstance(cls, type) and issubclass(cls, engine.errors.ShoalError) and cls is not engine.errors.ShoalError:
            if cls.code == "UNREACHABLE":
                continue  # the SDK's own, never an HTTP answer (the page says so below the table)
            if not any(f"`{cls.code}`" in line and f"| {cls.status}" in line for line in table):
                missing.append(f"{cls.code} {cls.status}")
    assert not missing, f"error codes missing from the table in docs/http-api.md: {missing}"


SPAN = re.compile(r"`([^`\n]+)`")
OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
SHOAL_CALL = re.compile(r"^\s*(?:\w+=\S*\s+)*(?:\S*/)?shoal(?=\s|$)((?:\s+[a-z][a-z-]*)*)")
BENCH_CALL = re.compile(r"bench/(\w+)\.py\b")
# options of other tools the pages name, and which tool
OTHER_TOOLS = {"--no-deps": "pip", "--auto-truncate": "TEI's router"}


def shoal_commands() -> dict[tuple[str, ...], set[str]]:
    """Every `shoal` command path (("shoal", "taxonomy", "fit"), ...) and the options it takes, from the app."""
    import typer

    from shoal.cli import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root)
    found: dict[tuple[str, ...], set[str]] = {}

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        names = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        found[path] = names | {"--help", "-h", "--debug", "--version"}
        for name in cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else []:
            walk(cmd.get_command(ctx, name), (*path, name))

    walk(root, ("shoal",))
    return found


def code_pieces(text: str) -> list[str]:
    """The page's inline code spans and the lines of its fenced blocks (comments cut), split at pipes and `&&`."""
    pieces, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            pieces.append(line.split(" #")[0])
        else:
            pieces += SPAN.findall(line)
    return [seg for p in pieces for seg in re.split(r"\||&&|;|\$\(", p)]


def doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def test_every_cli_option_the_docs_name_exists() -> None:
    """A `shoal CMD ... --opt` in a page names an option CMD has (as its --help lists it); an option named on
    its own is one of some shoal command, of the bench script it is named with, or of a listed other tool."""
    commands = shoal_commands()
    every = set().union(*commands.values())
    bench = {p.stem: p.read_text() for p in (REPO / "bench").glob("*.py")}
    wrong = []
    for page in doc_pages():
        for seg in code_pieces(page.read_text()):
            if m := SHOAL_CALL.match(seg):
                path: tuple[str, ...] = ("shoal",)
                for word in m.group(1).split():
                    if (*path, word) not in commands:
                        break
                    path = (*path, word)
                wrong += [
                    (page.name, " ".join(path), o) for o in OPTION.findall(seg[m.end(1) :]) if o not in commands[path]
                ]
            elif b := BENCH_CALL.search(seg):
                source = bench.get(b.group(1), "")
                wrong += [(page.name, b.group(0), o) for o in OPTION.findall(seg) if f'"{o}"' not in source]
            elif re.fullmatch(r"--[a-z][\w-]*", seg.strip()):
                o = seg.strip()
                if o not in every and o not in OTHER_TOOLS and not any(f'"{o}"' in s for s in bench.values()):
                    wrong.append((page.name, "(on its own)", o))
    assert not wrong, f"options the docs name that no command has (page, command, option): {wrong}"


HEADING_LINE = re.compile(r"^#{1,6} ")
SENTENCE_START = re.compile(r"^(?:[A-Z0-9`*\[\"'_]|shoal\b)")


def test_every_section_starts_with_a_sentence() -> None:
    """Under each heading, prose opens with a sentence (a capital, a code span, a figure or the name shoal),
    never with a fragment such as " (`state:` in the config ..."; a section may open with a table, a list, a
    block or a sub-heading instead."""
    bad = []
    for page in doc_pages():
        lines, fenced = page.read_text().splitlines(), False
        for i, line in enumerate(lines):
            if line.startswith("```"):
                fenced = not fenced
            if fenced or not HEADING_LINE.match(line):
                continue
            nxt = next((x for x in lines[i + 1 :] if x.strip()), "")
            if nxt.startswith(("#", "|", "```", "- ", "* ", "    ", "<", "!", ">")) or re.match(r"\d+\. ", nxt):
                continue
            if not SENTENCE_START.match(nxt) or nxt.startswith("("):
                bad.append(f"{page.name}:{i + 1} {line!r} -> {nxt[:50]!r}")
    assert not bad, "sections that do not start with a sentence:\n" + "\n".join(bad)
