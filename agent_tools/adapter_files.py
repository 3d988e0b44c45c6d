"""A tuned fit's adapter folder on disk: put in place by rename (never half there), with the modes the rest of
the fit has, and checked against the digest its fitted index recorded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from agent_tools.errors import TaxonomyError


def _umask() -> int:
    mask = os.umask(0o022)  # read by setting; put back at once
    os.umask(mask)
    return mask


def place(built: Path, folder: Path) -> None:
    """Move a freshly trained adapter to `folder`, replacing an older one by two renames (a reader sees the old
    folder or the new one, for the instant between them none), its files made 0644 and the folder 0755 under
    the usual umask like the fit's other files (training writes them 0600 in a private temporary folder)."""
    mask = _umask()
    staged = folder.with_name(folder.name + ".new")
    if staged.exists():
        shutil.rmtree(staged)
    shutil.move(str(built), staged)
    for name in os.listdir(staged):
        os.chmod(staged / name, 0o666 & ~mask)
    os.chmod(staged, 0o777 & ~mask)
    old = folder.with_name(folder.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if folder.exists():
        folder.rename(old)
    staged.rename(folder)
    if old.exists():
        shutil.rmtree(old)


def check(adapter: Path, recorded: str | None, fitted: Path) -> None:
    """The adapter beside a fitted index is the one it was fitted with (indexes saved before digests were
    recorded are taken as they are)."""
    from engine.catalogue.weights import adapter_digest

    if recorded is not None and adapter_digest(adapter) != recorded:
        raise TaxonomyError(
            f"fitted index {fitted} was fitted with another tuned adapter than the one beside it "
            "(a fit still being written, or files copied apart); run `shoal taxonomy fit` again"
        )
