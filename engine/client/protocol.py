"""`ShoalClient`, the one client type the pipeline and the agent tools take: Engine, AsyncEngine, Client and
AsyncClient all satisfy it, and `client.aio` is the async call surface to await whichever was passed."""

from __future__ import annotations

from typing import Protocol

from engine.client.calls import ModelCalls


class ShoalClient(Protocol):
    """Any shoal client: an async core (AsyncEngine, AsyncClient) or a blocking facade (Engine, Client)."""

    @property
    def aio(self) -> ModelCalls:
        """encode / score / extract / models to await: the client itself when it is async, else a bridge to
        the facade's loop thread (its calls never block the caller's event loop)."""
        ...
