"""`shoal ingest`, `shoal search`, `shoal reindex`: the command implementations shoal/cli.py registers.

Only typer is imported here; each command imports what it needs when it runs (fast --help). Errors a user
causes (config, store, filter, lock, path) are raised as they are: the shoal command group prints them as
one or two lines with their exit code (1; 2 when a server or store cannot be reached).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from connectors.base import Hit
    from pipeline.config import PipelineConfig

DEFAULT_DB = "lancedb://./shoal-data"
MODES = ("hybrid", "dense", "text", "sparse", "multivector")  # pipeline.search.MODES (a test keeps them equal)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="store URL: lancedb://PATH (default ./shoal-data), qdrant://HOST:PORT/COLL, qdrant+edge://PATH, "
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
ShardOpt = Annotated[
    str | None,
    typer.Option(
        "--shard", help="I/N: take shard I (from 0) of N of the files, by path hash, beside N-1 other writers; "
        "default: SHOAL_SHARD, or JOB_COMPLETION_INDEX of SHOAL_SHARD_COUNT (a Kubernetes Indexed Job)",
    ),
]  # fmt: skip
RebuildOpt = Annotated[
    bool,
    typer.Option(
        "--rebuild-indexes", help="train the store's indexes again over the whole collection (default: add what "
        "changed to them, compact past a threshold)",
    ),
]  # fmt: skip
SearchUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="SHOAL_URL",
        help="a shoal server: embeds the query there, and searches there when it serves this store (--db): "
        "no model or store driver loads here",
    ),
]


def _config(
    config: Path | None, db: str | None, collection: str | None, url: str | None, state: str | None,
    include: list[str] | None = None, exclude: list[str] | None = None,
) -> PipelineConfig:  # fmt: skip
    from pipeline.config import load_config

    cfg = load_config(config, db=db, collection=collection, state=state)
    if url:
        cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"url": url})})
    if include or exclude:
        source = cfg.source.model_copy(
            update={"include": include or cfg.source.include, "exclude": [*cfg.source.exclude, *(exclude or [])]}
        )
        cfg = cfg.model_copy(update={"source": source})
    return cfg


async def _ingest_roots(
    jobs: list[tuple[Path, PipelineConfig]], quiet: bool, as_json: bool, recorded: bool = False,
    shard: str | None = None, rebuild: bool = False,
) -> int:  # fmt: skip
    """Run ingest over (root, config) pairs with one client; returns the worst exit code. A `recorded` root
    (reindex) that is gone is reported and the others still run."""
    import sys

    from pipeline.cli_output import RichProgress, print_summary
    from pipeline.config import ConfigError
    from pipeline.run import ingest_async, open_client
    from pipeline.shard import shard_from

    share = shard_from(shard, os.environ)  # a bad --shard fails before a model or store is opened
    client = open_client(jobs[0][1])
    worst = 0
    try:
        for root, cfg in jobs:
            progress = RichProgress(quiet)  # on stderr: --json keeps stdout clean, the progress stays
            try:
                s = await ingest_async(
                    root, cfg, client=client, progress=progress, shard=share, rebuild_indexes=rebuild
                )
            except ConfigError as e:
                if e.code not in ("PATH_NOT_FOUND", "INVALID_PATH") or not recorded:
                    raise
                # one recorded root is gone: the others are still reindexed
                print(f"{e.code}: {e.message}\n  `shoal forget {root}` stops tracking it", file=sys.stderr)
                worst = max(worst, 3)
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
    path: Annotated[Path, typer.Argument(help="a folder of documents (PDF, Markdown, HTML, text) or one file")],
    config: Annotated[Path | None, typer.Option("--config", help="pipeline config, YAML or TOML")] = None,
    db: DbOpt = None,
    collection: CollOpt = None,
    url: UrlOpt = None,
    state: StateOpt = None,
    include: Annotated[
        list[str] | None,
        typer.Option("--include", "-i", help="only files matching this glob, e.g. '**/*.md' (repeatable)"),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", "-x", help="also skip files and folders matching this glob (repeatable)"),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
    shard: ShardOpt = None,
    rebuild_indexes: RebuildOpt = False,
) -> None:
    """Ingest a folder (or one file) into a vector store: parse, chunk, enrich, write; unchanged files are skipped.

    Exit code 0 when every file was ingested, 3 when some failed (the rest is ingested), 1 on a path, config,
    store or lock error (before any document is read; a missing path is not recorded), 2 when --url or the
    store's server cannot be reached.
    """
    import asyncio

    from pipeline.roots import check_root

    root = check_root(path)  # before anything is opened, created or recorded
    cfg = _config(config, db, collection, url, state, include, exclude)
    run = _ingest_roots([(root, cfg)], quiet, as_json, shard=shard, rebuild=rebuild_indexes)
    raise typer.Exit(asyncio.run(run))


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
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="how many hits (at least 1)", min=1)] = 5,
    mode: Annotated[
        str, typer.Option("--mode", help="hybrid (default), dense, text, sparse or multivector")
    ] = "hybrid",
    url: SearchUrlOpt = None,
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per hit")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="say on stderr where the search ran (a warm server, or here)")
    ] = False,
) -> None:
    """Search an ingested collection in any store: hybrid keyword + vector (fused) by default.

    Without --url, a `shoal serve --db` of the same embedded store running on this machine is found (it
    leaves a discovery file in the store's folder) and answers, so nothing loads here; --verbose says so.
    Reads only: a store that does not exist is an error, never created. Exit code 1 (one line, no traceback)
    on a bad filter, an unknown field or collection, or a store error; 2 when --url cannot be reached.
    """
    import asyncio

    if mode not in MODES:
        raise typer.BadParameter(f"mode must be one of {', '.join(MODES)}", param_hint="--mode")
    if not (filter or rerank or state):  # a warm server that serves this store answers it all
        found = _warm_search(url, query, db or DEFAULT_DB, collection, top_k, mode, where, verbose)
        if found is not None:
            _print_hits(found, query, mode, False, as_json)
            return
    if verbose:
        _say("searching here: the query's model and the store driver load in this process")
    from pipeline.search import search_async

    client = None
    if url:
        from engine.client.http import AsyncClient

        client = AsyncClient(url)

    async def run() -> list[Hit]:
        try:
            return await search_async(
                query, db=db or DEFAULT_DB, collection=collection, top_k=top_k, where=where or None,
                filter=filter, mode=mode, rerank=rerank, client=client, state=state,  # type: ignore[arg-type]
            )  # fmt: skip
        finally:
            if client is not None:
                await client.close()

    if as_json:  # machine output: nothing drawn, and rich not imported
        hits = asyncio.run(run())
    else:
        from pipeline.cli_output import working

        with working(f"searching {db or DEFAULT_DB} (loading the query's model here)"):
            hits = asyncio.run(run())
    _print_hits(hits, query, mode, bool(rerank), as_json)


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def _warm_search(
    url: str | None,
    query: str,
    db: str,
    collection: str | None,
    top_k: int,
    mode: str,
    where: list[str] | None,
    verbose: bool,
) -> list[Hit] | None:
    """The hits from a warm server that serves `db`: the one --url names, else the one the store's discovery
    file names (when it is alive); None when none answers for this store (the search then runs here)."""
    from pipeline.remote import served_search

    if url:
        found = served_search(url, query, db, collection, top_k, mode, where)
        if verbose:
            _say(f"searched by the server at {url}" if found is not None else f"{url} does not serve {db}")
        return found
    from pipeline.discovery import discover

    announced = discover(db)
    if announced is None or announced.url is None:
        if verbose and announced is not None:
            _say(announced.why)
        return None
    from pipeline.config import ConfigError

    try:
        found = served_search(announced.url, query, db, collection, top_k, mode, where)
    except ConfigError as e:
        if e.code not in ("UNAUTHORIZED", "FORBIDDEN"):
            raise  # the server's answer about this query (a bad filter) is the answer here too
        found = None  # a server behind a key this shell does not have: search here instead
    if verbose:
        _say(announced.why if found is not None else f"{announced.url} did not answer for this store")
    return found


def _print_hits(hits: list[Hit], query: str, mode: str, reranked: bool, as_json: bool) -> None:
    if as_json:
        for h in hits:
            print(json.dumps({"id": h.id, "score": h.score, "text": h.text, **h.metadata}, default=str))
        return
    from pipeline.cli_output import print_hits

    print_hits(hits, query, mode, reranked)


def reindex_command(
    db: DbOpt = None,
    collection: CollOpt = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="keep running: re-ingest a root when its files change")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print each summary as JSON")] = False,
    state: StateOpt = None,
    shard: ShardOpt = None,
    rebuild_indexes: RebuildOpt = False,
) -> None:
    """Re-run ingest over every root recorded in the store's manifest (for cron); --watch follows changes.

    With a server store the manifest lives in the store itself, so a job with no volume reindexes incrementally.
    With nothing recorded it exits 1 and creates nothing. A recorded root that is gone is reported (exit 3):
    `shoal forget PATH` stops tracking it.
    """
    import asyncio

    from pipeline.config import PipelineConfig
    from pipeline.manage import reading

    uri = db or DEFAULT_DB
    with reading(uri, state) as (_, manifest):
        roots = manifest.roots(collection) if manifest is not None else []
    if not roots:
        from pipeline.config import ConfigError

        raise ConfigError(f"nothing recorded in {uri}: run `shoal ingest PATH` first", code="NOTHING_RECORDED")
    jobs = [(Path(r), PipelineConfig.model_validate({**c, "db": uri, "state": state})) for _, r, c in roots]
    if not watch:
        raise typer.Exit(asyncio.run(_ingest_roots(jobs, quiet, as_json, True, shard, rebuild_indexes)))
    from watchfiles import watch as watch_changes

    from pipeline.cli_output import console

    # the watcher is live before the first pass, so an edit made during that pass is not missed
    first = True
    for changes in watch_changes(*[r for r, _ in jobs], debounce=1000, yield_on_timeout=True, rust_timeout=500):
        if first:
            asyncio.run(_ingest_roots(jobs, quiet, as_json, True, shard, rebuild_indexes))
            console.print(f"watching {len(jobs)} folder(s); Ctrl-C to stop")
            first = False
            continue
        touched = {Path(p) for _, p in changes}
        todo = [(r, c) for r, c in jobs if any(r == t or r in t.parents for t in touched)]
        if todo:
            asyncio.run(_ingest_roots(todo, quiet, as_json, True, shard))
