"""The command group every `shoal` command runs in: --debug anywhere, expected errors as short lines and exit codes.

An expected error (see shoal.failures) prints one or two lines on stderr and exits with its documented code;
a usage error exits 1; `--debug` (anywhere on the line) or SHOAL_DEBUG=1 shows the full traceback instead.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from shoal import __version__
from shoal.failures import USAGE, explain

DEBUG_KEY = "shoal.debug"
GLOBAL_OPTIONS = [
    ("-h, --help", "show this message and exit (and `shoal COMMAND --help` for a command)"),
    ("--version", "print the version and exit"),
    ("--debug", "show tracebacks instead of one-line errors (anywhere on the line; or SHOAL_DEBUG=1)"),
]


# click's UsageError (bad option, missing argument), as the click that typer vendors defines it
USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _usage_error(exc: BaseException) -> bool:
    return isinstance(exc, USAGE_ERROR)


class ShoalGroup(TyperGroup):
    """TyperGroup with the CLI's error contract (see the module docstring) and the global flags.

    --version, --debug and the group's own --help are read here rather than declared as options: typer builds
    a pydantic adapter for every option it processes, and the group's options are processed on every call,
    so any declared group option would cost each `shoal CMD --help` the import of pydantic.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end] or os.environ.get("SHOAL_DEBUG", "") not in ("", "0", "false"):
            ctx.meta[DEBUG_KEY] = True
            args = [a for i, a in enumerate(args) if not (a == "--debug" and i < end)]
        if args[:1] == ["--version"]:
            print(f"shoal {__version__}")
            ctx.exit()
        if args[:1] and args[0] in ctx.help_option_names:
            print(self.get_help(ctx))
            ctx.exit()
        return super().parse_args(ctx, args)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and not getattr(cmd, "_shoal_plain", False):
            plain_help(cmd, ctx)
        return cmd

    def get_help_option(self, ctx: Any) -> Any:
        return None  # the group's --help is read in parse_args (see the class docstring)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Global options"):
            formatter.write_dl(GLOBAL_OPTIONS)
        super().format_options(ctx, formatter)

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except Exception as e:
            if _usage_error(e):
                e.exit_code = USAGE  # type: ignore[attr-defined]  # click's default is 2, our "unreachable"
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as e:
            if _usage_error(e):
                e.exit_code = USAGE  # type: ignore[attr-defined]
                raise
            failure = None if ctx.meta.get(DEBUG_KEY) else explain(e)
            if failure is None:
                raise
            sys.stdout.flush()
            for line in failure.lines():
                print(line, file=sys.stderr)
            raise typer.Exit(failure.exit_code) from None


def first_paragraph(text: str | None) -> str:
    """A command's help up to its first blank line, on one line: what the command list shows, never cut off."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


def plain_help(cmd: Any, ctx: Any) -> None:
    """The command list shows each command's whole first paragraph (click cuts it at about 45 characters), and
    a repeatable option shows its item's placeholder (`<str>`, with `...` for an argument), not `<list[str]>`."""
    cmd.short_help = first_paragraph(cmd.help)
    for param in cmd.params:
        if param.metavar is not None or getattr(param, "is_flag", False):
            continue
        shown = param.display_type(ctx) if hasattr(param, "display_type") else None
        if isinstance(shown, str) and shown.startswith("<list[") and shown.endswith("]>"):
            item = f"<{shown[6:-2].lower()}>"  # the usage line keeps its own name for the parameter
            param.display_type_rich = lambda ctx=None, item=item: item
    cmd._shoal_plain = True
