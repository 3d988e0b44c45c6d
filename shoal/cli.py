"""The `shoal` command line: the app, its global options (--version, --debug) and the commands it registers.

Every command module imports only typer at module level, so `shoal --help` and `shoal CMD --help` import
no torch, no store driver and no model code. Exit codes: 0 ok, 1 usage or config error, 2 a server or store
could not be reached, 3 some files failed (ingest, reindex). Expected errors print one or two lines;
`--debug` (anywhere on the line) or SHOAL_DEBUG=1 prints the traceback instead.
"""

from __future__ import annotations

import typer

from agent_tools.cli import mcp_command
from pipeline.cli import ingest_command, reindex_command, search_command
from shoal.commands import encode, models, serving, status, store, taxonomy
from shoal.commands.base import ShoalGroup
from shoal.commands.extract import extract_command

app = typer.Typer(
    cls=ShoalGroup,  # --version, --debug, and expected errors as one or two lines with their exit code
    help="shoal: serve many small models (embedders, rerankers, sparse, late interaction) from one engine, "
    "ingest documents into vector stores and search them.",
    epilog="Exit codes: 0 ok, 1 usage or config error, 2 server or store unreachable, 3 some files failed. "
    "Docs: README.md and docs/ in the project.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["--help", "-h"]},  # every command's too
    add_completion=False,
    rich_markup_mode=None,  # plain help: no rich import, so --help answers fast
    pretty_exceptions_enable=False,
)


# serving and models
app.command()(serving.serve)
app.command()(serving.worker)
app.command()(encode.encode)
app.add_typer(models.app, name="models")
app.command()(status.status)
app.command()(serving.tune)
# documents: ingest, search, and what the store holds
app.command("ingest")(ingest_command)
app.command("search")(search_command)
app.command("reindex")(reindex_command)
app.command("collections")(store.collections_command)
app.command("sources")(store.sources_command)
app.command("forget")(store.forget_command)
app.command("delete")(store.delete_command)
# agents
app.command("mcp")(mcp_command)
app.command("extract")(extract_command)
app.add_typer(taxonomy.app, name="taxonomy")


if __name__ == "__main__":
    app()
