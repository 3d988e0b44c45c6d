"""shoal: many small task-specific models served from one engine. Public SDK re-exports."""

from engine.client import AsyncClient
from engine.config import EngineSettings
from engine.errors import ShoalError
from engine.runtime import AsyncEngine
from engine.sync import Client, Engine

__all__ = ["AsyncClient", "AsyncEngine", "Client", "Engine", "EngineSettings", "ShoalError"]
__version__ = "0.1.0"
