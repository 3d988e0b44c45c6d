"""`shoal ingest`, `shoal search`, `shoal reindex`: the command implementations shoal/cli.py registers."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from pipeline.config import DEFAULT_DB

console = Console(stderr=True)
out = Console()

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="store URL: lancedb://PATH (default ./shoal-data), qdrant://HOST:PORT/COLL, qdrant+local://PATH, "
        "chroma://HOST:PORT/COLL, chroma+local://PATH, weaviate://HOST:PORT/Coll",
    ),
]
CollOpt = Annotated[
    str | None, typer.Option("--collection", "-c", help="collection name; default: the one in the URL, else chunks")
]
StateOpt = Annotated[
    str | None,
    typer.Option(
        "--state", help="where the ingest manifest lives: a folder, or 'store' (inside the store); default: the "
        "store's folder for embedded stores, the store itself for servers",
    ),
]  # fmt: skip
UrlOpt = Annotated[str | None, typer.Option("--url", help="send tasks to a shoal server instead of in-process")]


class RichProgress:
    """The ingest progress bar: files, chunks, tokens/s and ETA."""

    def __init__(self, quiet: bool = False) -> None:
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("files · {task.fields[chunks]} chunks · {task.fields[rate]} tok/s"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=quiet,
        )
        self.task: Any = None
        self.chunks = self.tokens = 0
        self.t0 = time.perf_counter()
        self._mu = threading.Lock()

    def start(self, root: str, files: int) -> None:
        self.bar.start()
        self.t0 = time.perf_counter()
        self.task = self.bar.add_task(Path(root).name or root, total=files, chunks=0, rate=0)

    def file_done(self, rel: str, status: str, chunks: int, tokens: int) -> None:
        with self._mu:
            self.chunks += chunks
            self.tokens += tokens
            rate = f"{self.tokens / max(1e-6, time.perf_counter() - self.t0):,.0f}"
            self.bar.update(self.task, advance=1, chunks=self.chunks, rate=rate)

    def phase(self, name: str) -> None:
        if self.task is not None:
            self.bar.update(self.task, description=name)

    def stop(self) -> None:
        self.bar.stop()


def print_summary(s: Any) -> None:
    t = Table(title=f"ingest {s.root} -> {s.db} [{s.collection}]", show_header=False)
    t.add_column("what")
    t.add_column("count", justify="right")
    rows = [
        ("files seen", s.files_seen),
        ("unchanged (skipped)", s.files_unchanged),
        ("processed", s.files_processed),
        ("failed", len(s.files_failed)),
        ("deleted (gone from the folder)", s.files_deleted),
        ("pages", s.pages),
        ("chunks embedded", s.chunks_embedded),
        ("tokens embedded", s.tokens_embedded),
        ("chunks written", s.chunks_written),
        ("chunks removed (stale, deleted, orphans)", s.chunks_deleted + s.orphans_removed),
        ("time parse / embed / write (busy s)", f"{s.parse_s:.1f} / {s.embed_s:.1f} / {s.write_s:.1f}"),
        ("wall time (s)", f"{s.wall_s:.1f}"),
    ]
    for k, v in rows:
        t.add_row(k, str(v))
    out.print(t)
    problems = [("failed", f) for f in s.files_failed] + [("walk error", f) for f in s.walk_errors]
    problems += [("not followed", f) for f in s.files_refused] + [("warning", f) for f in s.warnings]
    if problems:
        p = Table(title="files needing attention")
        for col in ("status", "file", "reason"):
            p.add_column(col)
        for kind, f in problems:
            p.add_row(kind, f.path, f.reason)
        out.print(p)
    if not s.walk_complete:
        out.print("[yellow]the folder walk was incomplete: nothing was deleted from the store[/yellow]")


def _fail(e: Exception) -> typer.Exit:
    code = getattr(e, "code", type(e).__name__)
    message = str(getattr(e, "message", None) or e).strip()
    console.print(f"[red]{code}[/red]: {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(1)


def _expected_errors() -> tuple[type[Exception], ...]:
    """The errors a user causes (config, store, filter, lock): one line and exit 1, never a traceback."""
    from connectors.base import StoreError
    from connectors.filters import FilterError
    from engine.errors import ShoalError
    from pipeline.config import ConfigError
    from pipeline.manifest import StoreLocked

    return (ConfigError, ShoalError, StoreError, FilterError, StoreLocked)


def _config(config: Path | None, db: str | None, collection: str | None, url: str | None, state: str | None) -> Any:
    from pipeline.config import load_config

    cfg = load_config(config, db=db, collection=collection, state=state)
    if url:
        cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"url": url})})
    return cfg


async def _ingest_roots(jobs: list[tuple[Path, Any]], quiet: bool, as_json: bool) -> int:
    """Run ingest over (root, config) pairs with one client; returns the worst exit code."""
    from pipeline.roots import RootError
    from pipeline.run import ingest_async, open_client

    client = open_client(jobs[0][1])
    worst = 0
    try:
        for root, cfg in jobs:
            progress = RichProgress(quiet or as_json)
            try:
                s = await ingest_async(root, cfg, client=client, progress=progress)
            except RootError as e:  # one line; the other roots of a reindex still run
                worst = max(worst, _fail(e).exit_code)
                continue
            finally:
                progress.stop()
            if as_json:
                print(s.model_dump_json(), flush=True)
            else:
                print_summary(s)
            worst = max(worst, s.exit_code)
    finally:
        await client.close()
    return worst


def ingest_command(
    path: Annotated[Path, typer.Argument(help="folder of documents (PDF, Markdown, HTML, text)")],
    config: Annotated[Path | None, typer.Option("--config", help="pipeline config, YAML or TOML")] = None,
    db: DbOpt = None,
    collection: CollOpt = None,
    url: UrlOpt = None,
    state: StateOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Ingest a folder into a vector store: parse, chunk, enrich, write; unchanged files are skipped.

    Exit code 0 when every file was ingested, 3 when some failed (the rest is ingested), 1 on a config, root,
    store or lock error (before any document is processed).
    """
    try:
        cfg = _config(config, db, collection, url, state)
        code = asyncio.run(_ingest_roots([(path, cfg)], quiet, as_json))
    except _expected_errors() as e:
        raise _fail(e) from None
    raise typer.Exit(code)


def search_command(
    query: Annotated[str, typer.Argument(help="what to look for")],
    db: DbOpt = None,
    collection: CollOpt = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            "-w",
            help="portable filter FIELD=VALUE (also !=, >, >=, <, <=; A|B for any of; JSON); "
            "repeat to AND, e.g. --where source=a.pdf --where entity:organisation=Acme",
        ),
    ] = None,
    filter: Annotated[
        str | None,
        typer.Option(
            "--filter",
            "-f",
            help="the store's native filter: SQL for LanceDB (\"source = 'a.md'\"), JSON for "
            "Qdrant (a Filter) and Chroma (a where)",
        ),
    ] = None,
    rerank: Annotated[str | None, typer.Option("--rerank", help="reranker model for the candidates")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="how many hits")] = 5,
    mode: Annotated[
        str, typer.Option("--mode", help="hybrid (default), dense, text, sparse or multivector")
    ] = "hybrid",
    url: UrlOpt = None,
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per hit")] = False,
) -> None:
    """Search an ingested collection in any store: hybrid keyword + vector (fused) by default.

    Exit code 1 (one line, no traceback) on a bad filter, an unknown field or collection, or a store error.
    """
    from pipeline.search import MODES, search_async

    if mode not in MODES:
        raise typer.BadParameter(f"mode must be one of {', '.join(MODES)}")
    client = None
    if url:
        from engine.client.http import AsyncClient

        client = AsyncClient(url)
    try:
        hits = asyncio.run(
            search_async(
                query, db=db or DEFAULT_DB, collection=collection, top_k=top_k, where=where or None,
                filter=filter, mode=mode, rerank=rerank, client=client, state=state,  # type: ignore[arg-type]
            )
        )  # fmt: skip
    except _expected_errors() as e:
        raise _fail(e) from None
    if as_json:
        for h in hits:
            print(json.dumps({"id": h.id, "score": h.score, "text": h.text, **h.metadata}, default=str))
        return
    out.print(f"[bold]{len(hits)} hits[/bold] for {query!r} ({mode}{', reranked' if rerank else ''})")
    for i, h in enumerate(hits, 1):
        m = h.metadata
        where = " > ".join(m.get("heading_path") or [])
        pages = f"p.{','.join(map(str, m['pages']))}" if m.get("pages") else ""
        head = "  ".join(x for x in (f"[cyan]{m.get('source')}[/cyan]", pages, f"[dim]{where}[/dim]") if x)
        text = " ".join(h.text.split())
        out.print(f"\n[bold]{i}.[/bold] {head}  [dim]score {h.score:.4f}[/dim]", soft_wrap=True)
        body = textwrap.fill(text[:600] + ("..." if len(text) > 600 else ""), max(40, out.width - 4))
        out.print(textwrap.indent(body, "   "), highlight=False)


def reindex_command(
    db: DbOpt = None,
    collection: CollOpt = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="keep running: re-ingest a root when its files change")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print each summary as JSON")] = False,
    state: StateOpt = None,
) -> None:
    """Re-run ingest over every root recorded in the store's manifest (for cron); --watch follows changes.

    With a server store the manifest lives in the store itself, so a job with no volume reindexes incrementally.
    """
    from connectors.registry import open_store
    from pipeline.config import PipelineConfig
    from pipeline.run import manifest_for

    uri = db or DEFAULT_DB
    try:
        store = open_store(uri)
        try:
            manifest = manifest_for(store, state)
            try:
                roots = manifest.roots(collection)
            finally:
                manifest.close()
        finally:
            store.close()
    except _expected_errors() as e:
        raise _fail(e) from None
    if not roots:
        console.print(f"[yellow]nothing recorded in {uri}: run `shoal ingest PATH` first[/yellow]")
        raise typer.Exit(1)
    jobs = [(Path(r), PipelineConfig.model_validate({**c, "db": uri, "state": state})) for _, r, c in roots]
    try:
        if not watch:
            raise typer.Exit(asyncio.run(_ingest_roots(jobs, quiet, as_json)))
        from watchfiles import watch as watch_changes

        # the watcher is live before the first pass, so an edit made during that pass is not missed
        first = True
        for changes in watch_changes(*[r for r, _ in jobs], debounce=1000, yield_on_timeout=True, rust_timeout=500):
            if first:
                asyncio.run(_ingest_roots(jobs, quiet, as_json))
                console.print(f"watching {len(jobs)} folder(s); Ctrl-C to stop")
                first = False
                continue
            touched = {Path(p) for _, p in changes}
            todo = [(r, c) for r, c in jobs if any(r == t or r in t.parents for t in touched)]
            if todo:
                asyncio.run(_ingest_roots(todo, quiet, as_json))
    except _expected_errors() as e:
        raise _fail(e) from None
