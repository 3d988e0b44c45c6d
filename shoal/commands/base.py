"""The command group every `shoal` command runs in: --debug anywhere, expected errors as short lines and exit codes.

An expected error (see shoal.failures) prints one or two lines on stderr and exits with its documented code;
a usage error exits 1; `--debug` (anywhere on the line) or SHOAL_DEBUG=1 shows the full traceback instead.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import TYPE_CHECKING

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

if TYPE_CHECKING:
    from typer import _click  # the click typer vendors: TyperGroup's own signatures name these types

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

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
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

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and cmd not in _PLAIN:
            plain_help(cmd, ctx)
        return cmd

    def get_help_option(self, ctx: _click.Context) -> None:
        return None  # the group's --help is read in parse_args (see the class docstring)

    def format_options(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        with formatter.section("Global options"):
            formatter.write_dl(GLOBAL_OPTIONS)
        super().format_options(ctx, formatter)

    def make_context(
        self, info_name: str | None, args: list[str], parent: _click.Context | None = None, **extra: object
    ) -> _click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except Exception as e:
            if _usage_error(e):
                e.exit_code = USAGE  # type: ignore[attr-defined]  # click's default is 2, our "unreachable"
            raise

    def invoke(self, ctx: _click.Context) -> object:
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


_PLAIN: weakref.WeakSet[_click.Command] = weakref.WeakSet()  # commands plain_help has already shaped


def plain_help(cmd: _click.Command, ctx: _click.Context) -> None:
    """The command list shows each command's whole first paragraph (click cuts it at about 45 characters), and
    a repeatable option shows its item's placeholder (`<str>`, with `...` for an argument), not `<list[str]>`."""
    cmd.short_help = first_paragraph(cmd.help)
    for param in cmd.params:
        if not isinstance(param, (TyperArgument, TyperOption)):  # only typer's own parameters show a type
            continue
        if param.metavar is not None or getattr(param, "is_flag", False):
            continue
        shown = param.display_type(ctx)
        if shown.startswith("<list[") and shown.endswith("]>"):
            item = f"<{shown[6:-2].lower()}>"  # the usage line keeps its own name for the parameter

            def placeholder(ctx: _click.Context | None = None, item: str = item) -> str:
                return item

            param.display_type_rich = placeholder  # type: ignore[method-assign]  # this parameter's only
    _PLAIN.add(cmd)
