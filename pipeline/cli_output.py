"""What `shoal ingest`, `search` and `reindex` print: the progress bar, the run summary, the hits; and the
spinner and one-line summary every long command shows on stderr (`working`, `summary`)."""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

if TYPE_CHECKING:
    from connectors.base import Hit
    from pipeline.summary import IngestSummary

console = Console(stderr=True)
out = Console()


@contextmanager
def working(what: str, show: bool = True) -> Iterator[Progress | None]:
    """A spinner with the elapsed time on stderr while the block runs (its Progress, to add bars to), on a
    terminal only: piped or redirected, nothing is drawn (rich would leave a blank line), so stdout and
    `--json` output stay clean. Transient: the line goes when the block ends."""
    if not show or not console.is_terminal:
        yield None
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        bar.add_task(escape(what), total=None)
        yield bar


def summary(line: str) -> None:
    """The one-line human summary a long command ends with, on stderr (stdout keeps the command's output)."""
    print(line, file=sys.stderr, flush=True)


class RichProgress:
    """The ingest progress bar: files, chunks, files/s, chunks/s, tokens/s and ETA."""

    def __init__(self, quiet: bool = False) -> None:
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            disable=quiet or not console.is_terminal,  # piped: no bar (rich would print its last frame)
        )
        self.task: TaskID | None = None
        self.parts: dict[str, TaskID] = {}  # rel -> the bar of a large file being written window by window
        self.chunks = self.tokens = self.files = 0
        self.t0 = time.perf_counter()
        self._mu = threading.Lock()

    def start(self, root: str, files: int) -> None:
        self.bar.start()
        self.t0 = time.perf_counter()
        self.task = self.bar.add_task(escape(Path(root).name or root), total=files, info=self._info())

    def file_done(self, rel: str, status: str, chunks: int, tokens: int) -> None:
        with self._mu:
            if rel in self.parts:  # a large file's own bar goes when the file is done
                self.bar.remove_task(self.parts.pop(rel))
            self.chunks += chunks
            self.tokens += tokens
            self.files += 1
            if self.task is not None:
                self.bar.update(self.task, advance=1, info=self._info())

    def file_part(self, rel: str, chunks: int, tokens: int, done: int, total: int) -> None:
        """A window of a large file is written: its own bar (chunks done of the file's), and the totals."""
        with self._mu:
            self.chunks += chunks
            self.tokens += tokens
            if self.task is not None:
                self.bar.update(self.task, info=self._info())
            if rel not in self.parts:
                self.parts[rel] = self.bar.add_task(escape(f"  {rel}"), total=total, info="chunks of this file")
            self.bar.update(self.parts[rel], completed=done)

    def _info(self) -> str:
        took = max(1e-6, time.perf_counter() - self.t0)
        rates = (
            f"{self.files / took:,.1f} files/s · {self.chunks / took:,.1f} chunks/s · {self.tokens / took:,.0f} tok/s"
        )
        return f"files · {self.chunks} chunks · {rates}"

    def phase(self, name: str) -> None:
        if self.task is not None:
            self.bar.update(self.task, description=name)

    def stop(self) -> None:
        self.bar.stop()


def print_summary(s: IngestSummary) -> None:
    title = escape(f"ingest {s.root} -> {s.db}, collection {s.collection}")
    t = Table(title=title, show_header=False)
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
    if s.indexes:
        out.print(escape(f"indexes ({s.shard and f'shard {s.shard}, ' or ''}{s.indexes})"))
    problems = [("failed", f) for f in s.files_failed] + [("walk error", f) for f in s.walk_errors]
    problems += [("not followed", f) for f in s.files_refused] + [("warning", f) for f in s.warnings]
    if problems:
        p = Table(title="files needing attention")
        for col in ("status", "file", "reason"):
            p.add_column(col)
        for kind, f in problems:
            p.add_row(kind, escape(f.path), escape(f.reason))
        out.print(p)
    if not s.walk_complete:
        out.print("[yellow]the folder walk was incomplete: nothing was deleted from the store[/yellow]")
    out.print(summary_line(s), highlight=False, markup=False)


def summary_line(s: IngestSummary) -> str:
    """The run in one line: what was done, what failed, and the rates over the wall time."""
    took = max(s.wall_s, 1e-6)
    failed = f", {len(s.files_failed)} failed" if s.files_failed else ""
    done = f"{plural(s.files_processed, 'file')} ingested ({s.files_unchanged} unchanged{failed})"
    rates = f"{s.files_processed / took:.1f} files/s, {s.chunks_written / took:.1f} chunks/s"
    return f"{done}: {plural(s.chunks_written, 'chunk')} written in {s.wall_s:.1f} s ({rates})"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def print_hits(hits: list[Hit], query: str, mode: str, reranked: bool) -> None:
    out.print(
        f"[bold]{plural(len(hits), 'hit')}[/bold] for {escape(repr(query))} ({mode}{', reranked' if reranked else ''})"
    )
    for i, h in enumerate(hits, 1):
        m = h.metadata
        where = escape(" > ".join(_strings(m.get("heading_path"))))
        pages = f"p.{','.join(_strings(m.get('pages')))}" if m.get("pages") else ""
        source = f"[cyan]{escape(str(m.get('source')))}[/cyan]"
        head = "  ".join(x for x in (source, pages, f"[dim]{where}[/dim]" if where else "") if x)
        text = " ".join(h.text.split())
        out.print(f"\n[bold]{i}.[/bold] {head}  [dim]score {h.score:.4f}[/dim]", soft_wrap=True)
        body = textwrap.fill(text[:600] + ("..." if len(text) > 600 else ""), max(40, out.width - 4))
        out.print(textwrap.indent(body, "   "), highlight=False, markup=False)


def _strings(value: object) -> list[str]:
    """A list field of a hit (heading path, pages) as text; nothing when the store left it out."""
    return [str(v) for v in value] if isinstance(value, list | tuple) else []
