"""Tuned profiles on disk, per (model, device kind), and what the model listings show of them (no torch import:
`shoal models` reads this)."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import TypedDict

from engine.catalogue.cards import Profile
from engine.residency.reports import PrecisionRow, PrecisionSummary, TuneReport


class StoredTune(TypedDict):
    """One entry of the file: the tuned profile (as Profile dumps it) and the tune's report."""

    profile: dict[str, str | int | bool]
    report: TuneReport


def device_kind(device: str) -> str:
    """What the profile store keys hardware by: 'cpu', or the CUDA device's name ('cuda-nvidia-h200')."""
    if not device.startswith("cuda"):
        return "cpu"
    import torch  # only CUDA needs it, to read the device's name

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(torch.device(device))
        return "cuda-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return "cpu"


class ProfileStore:
    """A JSON file of tuned profiles keyed '<model>@<device kind>'; writes are atomic."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()

    def _read(self) -> dict[str, StoredTune]:
        """The file's entries as written by `put` (another program's edits are not checked)."""
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, model: str, kind: str) -> Profile | None:
        entry = self._read().get(f"{model}@{kind}")
        return Profile.model_validate(entry["profile"]) if entry else None

    def report(self, model: str, kind: str) -> TuneReport | None:
        """The stored report of the last tune of (model, device kind), gate figures included."""
        entry = self._read().get(f"{model}@{kind}")
        return entry.get("report") if entry else None

    def put(self, model: str, kind: str, profile: Profile, report: TuneReport) -> None:
        with self._lock:
            data = self._read()
            data[f"{model}@{kind}"] = {"profile": profile.model_dump(exclude_none=True), "report": report}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=2))
            tmp.replace(self.path)


def precision_summary(report: TuneReport | None, profile: Profile | None) -> PrecisionSummary | None:
    """What /v1/models and `shoal models` show of a stored tune: the precision in use, and per precision tried
    whether it passed the gate (None: not gated), its figures, and its best measured tokens/s."""
    if report is None or profile is None:
        return None
    best: dict[str, float] = {}
    for measured in report.get("grid", []):
        best[measured["dtype"]] = max(best.get(measured["dtype"], 0.0), measured["tokens_per_s"])
    gates = report.get("gates", {})
    tried = list(dict.fromkeys([*best, *gates]))
    rows = []
    for name in tried:
        gate = gates.get(name)
        row: PrecisionRow = {
            "precision": name,
            # float32 is the reference; a precision tuned without a gate (`shoal tune --dtypes` of one) shows None
            "passed": True if name == "float32" else (gate["passed"] if gate else None),
        }
        if gate:
            if "mean_cosine" in gate:
                row["mean_cosine"] = gate["mean_cosine"]
            if "ndcg_drop" in gate:
                row["ndcg_drop"] = gate["ndcg_drop"]
            if "entity_f1" in gate:
                row["entity_f1"] = gate["entity_f1"]
            if "error" in gate:
                row["error"] = gate["error"]
        if name in best:
            row["tokens_per_s"] = round(best[name], 1)
        rows.append(row)
    reason = report.get("reason") or "tuned by `shoal tune` on this device kind"
    return {
        "selected": profile.dtype,
        "reason": reason,
        "max_batch_tokens": profile.max_batch_tokens,
        "precisions": rows,
    }
