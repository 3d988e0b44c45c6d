"""`shoal models`: the catalogue, what each model does and whether its weights are on this machine.

The table is a list of columns (COLUMNS): a new column is one entry. The model id is never cut or wrapped
(the other columns wrap at spaces), so the table fits 80 columns, piped or not (shoal/commands/table.py).
The precisions `shoal tune` recorded follow the table, one line per tuned model (they are too long for a column).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from shoal.commands.base import ShoalGroup
from shoal.commands.pull import pull

Info = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One column of the models table: its header and how to show one model's info (cells wrap at spaces;
    the first column, the model id, never wraps)."""

    header: str
    cell: Callable[[Info], str]


def _outputs(info: Info) -> str:
    dims = info.get("dims", {})
    short = {"multivector": "multi", "classifications": "classes"}
    return " ".join(f"{short.get(o, o)}:{dims[o]}" if o in dims else short.get(o, o) for o in info["outputs"])


COLUMNS: list[Column] = [
    Column("model", lambda i: str(i["name"])),
    Column("tasks", lambda i: " ".join(i["tasks"])),
    Column("outputs", _outputs),
    Column("len", lambda i: str(i["max_sequence_length"])),  # short: ids up to 41 characters fit 80 columns
    Column("weights", lambda i: str(i["weights"]["source"])),
]
LEGEND = "len: the longest input, in tokens. weights: package, hf-cache or path = on this machine; hub = downloaded on first use; missing = not here."
PRECISIONS = "precisions that passed the quality gate in the last `shoal tune` on {device} (* the one in use):"


def precision_cell(summary: Info | None) -> str:
    """'int8* (cos 0.9937, nDCG -0.000), float32; bfloat16 failed': * marks the one in use."""
    if summary is None:
        return "not tuned"
    cells = []
    for p in summary["precisions"]:
        mark = "*" if p["precision"] == summary["selected"] else ""
        figures = f" (cos {p['mean_cosine']:.4f}, nDCG -{p['ndcg_drop']:.3f})" if "mean_cosine" in p else ""
        figures = f" (entity F1 {p['entity_f1']:.4f})" if "entity_f1" in p else figures
        cells.append(f"{p['precision']}{mark}{figures}" + (" failed" if p["passed"] is False else ""))
    return ", ".join(cells)


def catalogue_infos(
    model_dir: Path | None = None,
    offline: bool | None = None,
    device: str = "cpu",
    store: Path | None = None,
) -> list[Info]:
    """Every card's info (as /v1/models gives it), where its weights are, and the precisions `shoal tune`
    recorded for it on this kind of device."""
    from engine.catalogue.catalogue import Catalogue, model_info
    from engine.catalogue.weights import weights_status
    from engine.config import EngineSettings
    from engine.residency.store import ProfileStore, device_kind, precision_summary

    profiles, kind = ProfileStore(store or EngineSettings().profile_store), device_kind(device)
    out = []
    for c in Catalogue(model_dir).known():
        info = {**model_info(c, False), "weights": weights_status(c, offline).to_dict()}
        info["precision"] = precision_summary(profiles.report(c.id, kind), profiles.get(c.id, kind))
        out.append(info)
    return out


def render_table(infos: list[Info], width: int = 80, device: str = "cpu") -> None:
    """Print the table, what the weights column means, the tuned precisions, and how many models cannot load."""
    from shoal.commands.table import render

    print(render([c.header for c in COLUMNS], [[c.cell(i) for c in COLUMNS] for i in infos], width))
    missing = sum(1 for i in infos if not i["weights"]["available"])
    print()
    print(textwrap.fill(LEGEND, width))
    tuned = [i for i in infos if i.get("precision") is not None]
    if tuned:
        print()
        print(textwrap.fill(PRECISIONS.format(device=device), width))
        for i in tuned:
            print(textwrap.fill(f"{i['name']}: {precision_cell(i['precision'])}", width, subsequent_indent="    "))
    else:
        print(f"precisions: no model has been tuned on {device} yet (`shoal tune MODEL`)")
    if missing:
        note = (
            f"{missing} of {len(infos)} models have no weights here: `shoal models --json` lists where each was "
            "looked for, and docs/troubleshooting.md#missing-weights says how to provide them."
        )
        print(textwrap.fill(note, width))


# a group (`shoal models` lists, `shoal models pull` downloads) with the CLI's plain help and error contract
app = typer.Typer(cls=ShoalGroup, invoke_without_command=True, add_completion=False, rich_markup_mode=None)


@app.callback()
def models(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    model_dir: Annotated[Path | None, typer.Option(help="extra folder of model cards (*.yaml)")] = None,
    device: Annotated[str, typer.Option(help="show the precisions `shoal tune` recorded for this device")] = "cpu",
    store: Annotated[Path | None, typer.Option(help="profile store (default ~/.cache/shoal/profiles.json)")] = None,
) -> None:
    """List the model catalogue: tasks, outputs, max length, where each model's weights are, and the precisions
    that passed the quality gate in the last `shoal tune` on this device.

    `shoal models pull MODEL...` downloads models' weights ahead of use (network access needed once).
    """
    if ctx.invoked_subcommand is not None:
        return
    infos = catalogue_infos(model_dir, device=device, store=store)
    if as_json:
        print(json.dumps(infos, indent=2))
        return
    render_table(infos, device=device)


app.command("pull")(pull)
