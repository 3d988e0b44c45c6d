"""What a shoal server on a network lets a request reach, decided once from its settings: the folders model
ids and LoRA adapters may name (local folders off unless asked), the API keys, and the scrubbing of server
paths from error messages. `shoal serve` (engine.http.app) and `shoal mcp` (agent_tools.mcp_server) both
build theirs here, so every transport refuses the same ids with the same messages."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from engine.config import EngineSettings
from engine.http.auth import Auth, auth_from
from engine.http.redact import Scrub, scrubber


@dataclass(frozen=True)
class ServerPolicy:
    """The engine settings a server runs with, its auth (None keys: open) and its error-message scrubber."""

    settings: EngineSettings
    auth: Auth
    scrub: Scrub

    @classmethod
    def of(cls, settings: EngineSettings, adapters: Iterable[Path] = ()) -> ServerPolicy:
        """The policy of these settings, with `adapters` (tuned taxonomy fits' folders) allowed by their path;
        AuthConfigError for a key configuration it cannot use (a server refuses to start rather than run open)."""
        extra = [a for a in adapters if a not in settings.lora_folders]
        served = settings.model_copy(update={"lora_folders": [*settings.lora_folders, *extra]}) if extra else settings
        return cls(served, auth_from(served), scrubber(served))

    def message(self, text: str) -> str:
        """An error message as it may leave the server."""
        return self.scrub(text)
