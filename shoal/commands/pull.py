"""`shoal models pull MODEL...`: download models' weights ahead of use, into the cache the server reads.

The Hugging Face hub cache (`HF_HUB_CACHE`, `HF_HOME`, default ~/.cache/huggingface/hub) is where
`shoal serve`, `shoal worker` and the in-process engine on this machine look for a catalogue model's weights,
so a pulled model then loads offline. huggingface_hub shows each file's progress on stderr and resumes a
partial download; a model already here is reported and nothing is fetched. Exit 1 for a model the catalogue
lacks or one that has no hub repository, 2 when the hub cannot be reached (offline, or no network).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shoal.failures import UNREACHABLE, USAGE, CliError

if TYPE_CHECKING:
    from engine.catalogue.cards import ModelCard

OFFLINE_HINT = (
    "pulling needs network access to the Hugging Face hub: run it with HF_HUB_OFFLINE and SHOAL_OFFLINE unset"
)
RETRY_HINT = "check the network (or HF_ENDPOINT); run the command again and it resumes where it stopped"
# huggingface_hub's errors that mean "the repo or revision is not there" (exit 1); any other is the network (2)
MISSING = frozenset(
    ("RepositoryNotFoundError", "RevisionNotFoundError", "GatedRepoError", "EntryNotFoundError", "HFValidationError")
)


def _cause(exc: BaseException) -> str:
    """The first error in a chain (a refused connection, a DNS failure), on one short line."""
    seen = exc
    while (inner := seen.__cause__ or seen.__context__) is not None and inner is not seen:
        seen = inner
    return f"{type(seen).__name__}: {' '.join(str(seen).split())[:160]}"


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _pull_one(card: ModelCard, offline: bool) -> str:
    """Download one card's weights (unless they are here already); the summary line."""
    from engine.catalogue.weights import download, has_weights, weights_status

    status = weights_status(card, offline)
    if status.available:
        return f"{card.id}: already here ({status.source}: {status.location})"
    repo = card.source.hf_repo
    if not repo:
        raise CliError("NO_HUB_SOURCE", f"model {card.id!r} has no hub repository to pull from; {status.summary()}")
    if offline:
        raise CliError(
            "OFFLINE", f"cannot pull {card.id!r}: HF_HUB_OFFLINE or SHOAL_OFFLINE is set", OFFLINE_HINT, UNREACHABLE
        )
    started = time.perf_counter()
    try:
        folder = download(card, repo, card.source.revision)
    except Exception as e:  # noqa: BLE001 - every hub failure is one line with its exit code
        names = {c.__name__ for c in type(e).__mro__}
        missing = bool(names & MISSING) and "LocalEntryNotFoundError" not in names  # that one: the hub unreachable
        first = _cause(e)
        if missing:
            raise CliError("MODEL_NOT_ON_HUB", f"{repo} cannot be downloaded from the hub: {first}") from None
        message = f"could not download {repo} from the Hugging Face hub: {first}"
        raise CliError("HUB_UNREACHABLE", message, RETRY_HINT, UNREACHABLE) from None
    if not has_weights(folder, card):
        raise CliError("MODEL_NOT_ON_HUB", f"{repo} on the hub holds no weight files shoal can load", exit_code=USAGE)
    took = time.perf_counter() - started
    return f"{card.id}: pulled {_size(folder) / 1e6:,.0f} MB into {folder} in {took:.1f} s"


def pull(
    model: Annotated[
        list[str], typer.Argument(help="catalogue model ids (`shoal models` lists them)", show_default=False)
    ],
    model_dir: Annotated[Path | None, typer.Option(help="extra folder of model cards (*.yaml)")] = None,
) -> None:
    """Download models' weights into the Hugging Face cache that `shoal serve` and the engine on this machine
    read, so they then load offline. Needs network access; resumes an interrupted download.

    A model already here is reported and not fetched. Exit code 1 for a model the catalogue lacks or that has
    no hub repository, 2 when the hub cannot be reached (offline, or no network).
    """
    from engine.catalogue.catalogue import Catalogue
    from engine.catalogue.weights import offline_mode
    from engine.config import EngineSettings

    catalogue = Catalogue(model_dir)
    cards = [catalogue.get(n) for n in model]  # every name checked before anything is downloaded
    offline = offline_mode(EngineSettings().offline)
    for card in cards:
        print(_pull_one(card, offline), flush=True)
