"""Tuned by default: a model's first load on a device kind gates each precision the device offers, in the background.

float32 serves while the gate runs. Every precision `available()` offers besides float32 runs the shipped gate
set next to the float32 model already loaded (embedders and cross-encoders: engine/residency/gate.py; GLiNER
models: their entities, engine/residency/entity_gate.py); the gate run is also the speed
measurement (tokens per second on this machine, under whatever else it is doing), so nothing is assumed
from the instruction set. The fastest precision that passed, and beat float32 by MIN_SPEEDUP, is recorded in
the profile store and swapped in; a restart reads the record and loads that precision directly.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard

from engine.catalogue.cards import ModelCard, Profile
from engine.config import EngineSettings
from engine.errors import InvalidInput
from engine.model.gliner_runtime import GlinerModel
from engine.model.packed import PackedModel
from engine.model.precision import available, device_profile, profile_slot
from engine.residency.entity_gate import (
    EntityGateResult,
    EntityRun,
    EntitySet,
    compare_entities,
    entity_run,
    load_entity_set,
)
from engine.residency.gate import GateResult, GateRun, GateSet, compare, gate_run, load_gate_set
from engine.residency.ledger import Entry
from engine.residency.reports import GateFigures, PrecisionState, TuneReport
from engine.residency.stop import TuneStopped, check
from engine.residency.store import ProfileStore, device_kind
from engine.residency.tune import apply_profile

log = logging.getLogger("shoal.residency")
MIN_SPEEDUP = 1.05  # a precision replaces float32 only when its gate run is at least this much faster
WARMUP_TEXTS = 8  # texts run once, untimed, before a precision's timed gate run (kernel set-up, caches)
SPEED_ROUNDS = 2  # further timed runs of float32 and each passing candidate, alternating; each keeps its best

Tunable = PackedModel | GlinerModel  # the models a gate can measure: our backbones, and GLiNER's
Variant = Callable[[Tunable, str], Tunable]


def tunable(loaded: object) -> TypeGuard[Tunable]:
    return isinstance(loaded, PackedModel | GlinerModel)


def make_variant(reference: Tunable, precision: str) -> Tunable:
    """The reference model in another precision (what the engine would serve)."""
    return reference.variant(precision)


@dataclass(frozen=True)
class GateData:
    """What the gates read: the retrieval set (embedders, cross-encoders) and the entity set (GLiNER)."""

    retrieval: GateSet | None = None
    entities: EntitySet | None = None

    @classmethod
    def of(cls, model: Tunable, retrieval: GateSet | None, entities: EntitySet | None) -> GateData:
        """The set `model`'s gate reads, loaded from the shipped file when not given."""
        if isinstance(model, GlinerModel):
            return cls(entities=entities or load_entity_set())
        return cls(retrieval=retrieval or load_gate_set())

    def warm(self, model: Tunable, stop: threading.Event | None = None) -> None:
        """A few texts run once, untimed, before a timed run (kernel set-up, caches)."""
        if isinstance(model, GlinerModel):
            assert self.entities is not None
            entity_run(model, self.entities, WARMUP_TEXTS, stop)
        else:
            assert self.retrieval is not None
            check(stop)
            passages = self.retrieval.passages[:WARMUP_TEXTS]
            model.forward(model.encode_texts(passages, truncate=True))

    def run(self, model: Tunable, stop: threading.Event | None = None) -> GateRun | EntityRun:
        """One timed pass of `model` over its set; TuneStopped between two batches once `stop` is set."""
        if isinstance(model, GlinerModel):
            assert self.entities is not None
            return entity_run(model, self.entities, stop=stop)
        assert self.retrieval is not None
        return gate_run(model, self.retrieval, stop)

    @staticmethod
    def compare(ref: GateRun | EntityRun, run: GateRun | EntityRun, name: str) -> GateResult | EntityGateResult:
        if isinstance(ref, EntityRun) and isinstance(run, EntityRun):
            return compare_entities(ref, run, name)
        assert isinstance(ref, GateRun) and isinstance(run, GateRun)
        return compare(ref, run, name)


@dataclass
class Outcome:
    """What a tune chose: the profile to record, its report (gate figures, speeds, why), the model to serve."""

    profile: Profile
    report: TuneReport
    model: Tunable
    complete: bool = True  # False when it was stopped before every precision was tried: not recorded

    def serving(self, card: ModelCard, device: str) -> Tunable:
        """The chosen model, carrying `card` with the tuned profile applied and its precision, ready to serve."""
        card = apply_profile(card, self.profile, device)
        self.model.card = card
        self.model.precision = device_profile(card, self.model.device)
        log.info("%s now serves %s: %s", card.id, self.model.precision.name, self.report.get("reason"))
        return self.model


Tuner = Callable[[Tunable, threading.Event], Outcome]
Swap = Callable[[Tunable, Outcome], None]


def gateable(card: ModelCard) -> bool:
    """Whether the quality gate has a measure for this card's outputs."""
    encodes = "encode" in card.tasks and bool({"dense", "sparse", "multivector"} & set(card.outputs))
    entities = card.family == "gliner" and card.extract is not None and card.extract.kind == "gliner"
    return encodes or entities or (card.score is not None and card.score.kind == "classifier")


def card_precision(card: ModelCard, device: str) -> str | None:
    """The precision the card itself asks for on this device (a reduced one, or float32 with auto_tune off);
    None: the engine may choose."""
    slot = profile_slot(device)
    profile = card.profiles.get(slot, card.profiles["default"])
    if profile.dtype != "float32" or profile.auto_tune is False:
        return profile.dtype
    return None


def auto_tune(
    reference: Tunable,
    stop: threading.Event | None = None,
    *,
    budget_s: float = 60.0,
    gate_set: GateSet | None = None,
    entity_set: EntitySet | None = None,
    precisions: list[str] | None = None,
    variant: Variant = make_variant,
    min_speedup: float = MIN_SPEEDUP,
) -> Outcome:
    """Gate and time each of `precisions` (default: every one the device offers) against the float32
    `reference`; pick the fastest that passed, if it beat float32 by `min_speedup`. No further precision starts
    after `budget_s` seconds; once `stop` is set the run ends before its next batch, and the outcome (float32,
    incomplete) is not recorded."""
    try:
        return _auto_tune(
            reference, stop, budget_s, GateData.of(reference, gate_set, entity_set), precisions, variant, min_speedup
        )
    except TuneStopped:
        report: TuneReport = {"auto": True, "reason": "auto-tune stopped before it finished; float32 serves"}
        return Outcome(reference.precision.profile, report, reference, complete=False)


def _auto_tune(
    reference: Tunable,
    stop: threading.Event | None,
    budget_s: float,
    data: GateData,
    precisions: list[str] | None,
    variant: Variant,
    min_speedup: float,
) -> Outcome:
    started = time.monotonic()
    data.warm(reference, stop)
    ref = data.run(reference, stop)
    speeds = {"float32": ref.tokens_per_s}
    gates: dict[str, GateFigures] = {}
    skipped: list[str] = []
    passed: dict[str, Tunable] = {}  # the candidates that passed their gate, kept for the timing rounds
    for name in [n for n in precisions or available(reference.device) if n != "float32"]:
        if (stop is not None and stop.is_set()) or time.monotonic() - started > budget_s:
            skipped.append(name)
            continue
        try:
            model = variant(reference, name)
            data.warm(model, stop)
            run = data.run(model, stop)
        except TuneStopped:
            raise
        except Exception as exc:  # noqa: BLE001 - a precision that cannot run is refused, never served
            gates[name] = {"precision": name, "passed": False, "error": f"{type(exc).__name__}: {exc}"}
            continue
        result = data.compare(ref, run, name)
        gates[name] = result.as_dict()
        speeds[name] = run.tokens_per_s
        if result.passed:
            passed[name] = model
        del model
    # One timed run each is at the mercy of whatever else the machine is doing: float32 and every passing
    # candidate run again in turn, and each keeps its best, so a load spike on one run decides nothing.
    for _ in range(SPEED_ROUNDS if passed else 0):
        if (stop is not None and stop.is_set()) or time.monotonic() - started > budget_s:
            break
        speeds["float32"] = max(speeds["float32"], data.run(reference, stop).tokens_per_s)
        for name, model in passed.items():
            speeds[name] = max(speeds[name], data.run(model, stop).tokens_per_s)
    best = passed[max(passed, key=lambda n: speeds[n])] if passed else None
    fast = best is not None and speeds[best.precision.name] >= min_speedup * speeds["float32"]
    chosen = best if best is not None and fast else reference
    name = chosen.precision.name
    profile = reference.precision.profile.model_copy(update={"dtype": name})
    report: TuneReport = {
        "auto": True,
        "reason": _reason(name, speeds, gates, min_speedup),
        "seconds": round(time.monotonic() - started, 2),
        "gate_tokens": ref.tokens,
        "grid": [{"dtype": n, "tokens_per_s": s, "measured_by": "gate run"} for n, s in speeds.items()],
        "gates": gates,
        "skipped": skipped,
    }
    return Outcome(profile, report, chosen, complete=stop is None or not stop.is_set())


def _reason(name: str, speeds: dict[str, float], gates: dict[str, GateFigures], min_speedup: float) -> str:
    if name != "float32":
        ratio = speeds[name] / speeds["float32"]
        return f"auto-tuned: {name} is the fastest precision that passed the quality gate ({ratio:.2f}x float32)"
    failed = [n for n, g in gates.items() if not g["passed"]]
    slow = [n for n, g in gates.items() if g["passed"]]
    parts = []
    if failed:
        parts.append(f"{', '.join(failed)} failed the quality gate")
    if slow:
        parts.append(f"{', '.join(slow)} passed but ran under {min_speedup:.2f}x float32")
    return "auto-tuned: float32; " + ("; ".join(parts) or "no other precision was tried")


class BackgroundTuner:
    """One residency manager's background tunes: at most one per model; each records its outcome and hands
    it to `swap` (on the event loop) to serve."""

    def __init__(self, settings: EngineSettings, store: ProfileStore, tune: Tuner | None = None) -> None:
        self.settings, self.store = settings, store
        self._tune = tune or self._default
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stop = threading.Event()

    def _default(self, reference: Tunable, stop: threading.Event) -> Outcome:
        return auto_tune(reference, stop, budget_s=self.settings.auto_tune_budget_s)

    def running(self, model: str) -> bool:
        return model in self._tasks

    def wanted(self, card: ModelCard, loaded: object, device: str) -> bool:
        """A first load on this device kind, of a gateable model the engine may choose a precision for."""
        s = self.settings
        return (
            s.auto_tune
            and s.precision is None
            and tunable(loaded)
            and loaded.precision.name == "float32"
            and card.id not in self._tasks
            and card_precision(card, device) is None
            and gateable(card)
            and len(available(device)) > 1
            and self.store.get(card.id, device_kind(device)) is None
        )

    def start(self, loaded: Tunable, swap: Swap) -> None:
        model = loaded.card.id
        self._tasks[model] = asyncio.create_task(self._run(loaded, swap), name=f"shoal-tune-{model}")

    async def _run(self, loaded: Tunable, swap: Swap) -> None:
        model = loaded.card.id
        try:
            try:
                outcome = await asyncio.to_thread(self._tune, loaded, self._stop)
            except asyncio.CancelledError:  # the loop is shutting down: the thread stops before its next batch
                self._stop.set()
                raise
            if outcome.complete:
                self.store.put(model, device_kind(loaded.device), outcome.profile, outcome.report)
                if outcome.model is not loaded:
                    swap(loaded, outcome)
        except InvalidInput as exc:
            log.info("no auto-tune for %s: %s", model, exc.message)
        except Exception:  # noqa: BLE001 - a failed tune leaves float32 serving; it never stops the worker
            log.exception("auto-tune of %s failed; float32 keeps serving", model)
        finally:
            self._tasks.pop(model, None)

    async def wait(self, model: str) -> None:
        """Until the model's background tune (if any) has finished."""
        task = self._tasks.get(model)
        if task is not None:
            await asyncio.shield(task)

    async def aclose(self) -> None:
        self._stop.set()
        for task in list(self._tasks.values()):
            await asyncio.gather(task, return_exceptions=True)

    def loads_in(self, card: ModelCard, device: str) -> str:
        """The precision the model's own entry loads in on this device: recorded, pinned, or the card's."""
        return device_profile(self.tuned(card, device), device, self.settings.precision).name

    def tuned(self, card: ModelCard, device: str) -> ModelCard:
        """The card with the profile recorded for this device kind applied (as it is, when none is)."""
        profile = self.store.get(card.id, device_kind(device))
        return apply_profile(card, profile, device) if profile is not None else card

    def state(self, card: ModelCard, device: str, entry: Entry | None) -> PrecisionState:
        """What /v1/models shows of the precision: the one in use (None: not loaded), why, whether a tune runs."""
        in_use = entry.loaded.precision.name if entry is not None else None
        return {"precision": in_use, "reason": self.reason(card, device), "tuning": self.running(card.id)}

    def reason(self, card: ModelCard, device: str) -> str:
        """Why the model serves (or will serve) the precision it does on this device."""
        s = self.settings
        if s.precision is not None:
            return f"pinned by the engine setting precision={s.precision} (SHOAL_PRECISION)"
        if self.running(card.id):
            return "tuning: float32 serves while the quality gate runs each precision this device offers"
        report = self.store.report(card.id, device_kind(device))
        if report is not None:
            return str(report.get("reason") or "tuned by `shoal tune` on this device kind")
        asked = card_precision(card, device)
        if asked is not None:
            return f"the model card asks for {asked}"
        if not s.auto_tune:
            return "auto-tune off (SHOAL_AUTO_TUNE=0): float32 until `shoal tune`"
        if not gateable(card):
            return "float32: the quality gate has no measure for this model's outputs"
        if len(available(device)) == 1:
            return "float32 is the only precision this device runs fast"
        return "float32 until the first load gates each precision this device offers"
