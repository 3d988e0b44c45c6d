"""`shoal collections`, `shoal sources`, `shoal forget`, `shoal delete`: what a store holds, and removing it.

Listings read only (a store that does not exist is an error, never created). Removals say what they will
remove and ask first (`--yes` skips the question; with no terminal to ask, they refuse without --yes).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from typing import Annotated

import typer

from pipeline.cli import DEFAULT_DB, CollOpt, DbOpt, StateOpt
from shoal.commands.table import render, terminal_width

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d\u00a0%H:%M", time.localtime(t)) if t else "-"  # no-break space: never wrapped


def _confirm(question: str, yes: bool) -> None:
    """Ask before removing, on stderr (stdout keeps the command's output alone). With no terminal, an answer
    piped on stdin is read (and echoed after the question); none at all is a refusal, NOT_CONFIRMED, unless
    --yes was given."""
    if yes:
        return
    if sys.stdin.isatty():
        try:
            answer = typer.confirm(question, default=False, err=True)
        except typer.Abort:  # Ctrl-C, or the terminal closed
            print(file=sys.stderr, flush=True)  # end the question's line, before the error's
            answer = None
    else:
        line = sys.stdin.readline().strip()
        answer = line.lower() in ("y", "yes") if line else None
        if line:
            print(f"{question} [y/N]: {line}", file=sys.stderr)
    if answer is None:
        from pipeline.config import ConfigError

        message = "no confirmation given (no terminal?): pass --yes to remove without asking"
        raise ConfigError(message, code="NOT_CONFIRMED")
    if not answer:
        print("nothing removed", file=sys.stderr)
        raise typer.Exit(1)


def _collection(db: str | None, collection: str | None) -> tuple[str, str]:
    from connectors.registry import url_collection

    uri = db or DEFAULT_DB
    return uri, collection or url_collection(uri) or "chunks"


def collections_command(db: DbOpt = None, state: StateOpt = None, as_json: JsonOpt = False) -> None:
    """List the collections of a store: chunks, sources by status, and each ingested folder's last run."""
    from pipeline.manage import collections
    from pipeline.manifest import RunRow

    uri = db or DEFAULT_DB
    infos = collections(uri, state)
    if as_json:
        print(json.dumps([asdict(i) for i in infos], indent=2))
        return
    if not infos:
        print(f"no collections in {uri}")
        return
    rows = []
    for i in infos:
        srcs = ", ".join(f"{n} {s}" for s, n in sorted(i.sources.items())) or "-"
        for n, r in enumerate(i.roots or [RunRow(root="-", started=None, finished=None, status="")]):
            run = f"{_when(r['started'])} {r['status'] or ''}".strip()
            first = [i.name, str(i.chunks), srcs] if n == 0 else ["", "", ""]
            rows.append([*first, run, r["root"]])
    print(f"collections in {uri}\n")
    print(render(["collection", "chunks", "sources", "last run", "folder"], rows, terminal_width(), fold_last=True))


def sources_command(
    db: DbOpt = None, collection: CollOpt = None, state: StateOpt = None, as_json: JsonOpt = False
) -> None:
    """List the sources of a collection: status, chunks in the store, when ingested, and why a file failed."""
    from pipeline.cli_output import plural
    from pipeline.manage import sources

    uri, coll = _collection(db, collection)
    found = sources(uri, coll, state)
    if as_json:
        print(json.dumps([asdict(s) for s in found], indent=2))
        return
    print(f"sources of collection {coll} in {uri}\n")
    rows = [[s.source, s.status, str(s.chunks), _when(s.updated_at), s.error or s.root] for s in found]
    print(
        render(
            ["source", "status", "chunks", "ingested", "folder, or the failure"], rows, terminal_width(), fold_last=True
        )
    )
    failed = sum(s.status == "failed" for s in found)
    print(f"\n{plural(len(found), 'source')}, {plural(sum(s.chunks for s in found), 'chunk')}, {failed} failed")


def forget_command(
    path: Annotated[str, typer.Argument(help="a folder or file given to `shoal ingest` (it may be gone already)")],
    db: DbOpt = None,
    collection: Annotated[str | None, typer.Option("--collection", "-c", help="only in this collection")] = None,
    keep_chunks: Annotated[bool, typer.Option("--keep-chunks", help="stop tracking but keep its chunks")] = False,
    state: StateOpt = None,
    yes: YesOpt = False,
) -> None:
    """Stop tracking a folder: `reindex` no longer visits it, and its chunks are removed (unless --keep-chunks)."""
    from pipeline.cli_output import plural
    from pipeline.manage import find_roots, forget

    uri = db or DEFAULT_DB
    roots = find_roots(uri, path, collection, state)
    what = "; ".join(f"{r} (collection {c})" for c, r in roots)
    action = "stop tracking" if keep_chunks else "remove the chunks of and stop tracking"
    _confirm(f"{action} {what} in {uri}?", yes)
    removed = forget(uri, roots, keep_chunks, state)
    print(f"forgot {what}; {plural(removed, 'chunk')} removed")


def delete_command(
    source: Annotated[
        str | None, typer.Option("--source", "-s", help="a source: its path, or its path under the ingested folder")
    ] = None,
    collection: CollOpt = None,
    db: DbOpt = None,
    state: StateOpt = None,
    yes: YesOpt = False,
) -> None:
    """Delete one source's chunks (--source, in --collection) or a whole collection (--collection alone), after asking.

    A deleted source that is still in an ingested folder comes back at the next `reindex`: exclude it, move
    it out, or `shoal forget` the folder.
    """
    from pipeline.cli_output import plural
    from pipeline.manage import delete_collection, delete_sources, find_sources

    uri, coll = _collection(db, collection)
    if source is None:
        if not collection:
            raise typer.BadParameter("give --source PATH, or --collection NAME to drop a whole collection")
        _confirm(f"drop collection {coll!r} from {uri}, with every chunk and record of it?", yes)
        dropped = delete_collection(uri, coll, state)
        print(f"dropped collection {coll}" if dropped else f"no collection {coll} in {uri} (records cleared)")
        return
    found = find_sources(uri, source, coll, state)
    chunks = sum(s.chunks for s in found)
    names = ", ".join(f"{s.source} ({s.root})" for s in found)
    _confirm(f"delete {plural(chunks, 'chunk')} of {names} from collection {coll!r} in {uri}?", yes)
    removed = delete_sources(uri, coll, found, state)
    print(f"deleted {plural(removed, 'chunk')} of {names}")
