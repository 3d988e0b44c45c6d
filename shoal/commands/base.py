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

from shoal.failures import USAGE, explain

DEBUG_KEY = "shoal.debug"


def _usage_error(exc: BaseException) -> bool:
    """A click usage error (bad option, missing argument): typer vendors click, so match by its base class."""
    return isinstance(exc, typer.BadParameter.__mro__[1])  # UsageError


class ShoalGroup(TyperGroup):
    """TyperGroup with the CLI's error contract (see the module docstring)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end] or os.environ.get("SHOAL_DEBUG", "") not in ("", "0", "false"):
            ctx.meta[DEBUG_KEY] = True
            args = [a for i, a in enumerate(args) if not (a == "--debug" and i < end)]
        return super().parse_args(ctx, args)

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
