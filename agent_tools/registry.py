"""One definition per tool (a pydantic input model and an async function) and the context tools run in.

The same `Tool` is rendered three ways: an OpenAI function-calling schema (`Tool.openai`, served at
`GET /v1/tools`), an MCP tool (agent_tools/mcp_server.py) and a plain Python function (agent_tools/functions.py).
Arguments from any of them go through `Tool.parse`, so a bad call gets the same clear INVALID_INPUT message.
"""

from __future__ import annotations

import copy
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict, TypeVar

from pydantic import BaseModel, ValidationError

from agent_tools.backend import ModelBackend
from agent_tools.config import ToolSettings
from agent_tools.errors import InvalidInput, TaxonomyError
from agent_tools.fit_reload import FitWatch
from agent_tools.taxonomy.index import IndexCache, TaxonomyIndex
from agent_tools.taxonomy.tree import Taxonomy, build_taxonomy, load_taxonomy

if TYPE_CHECKING:
    from agent_tools.results import ToolResult
    from engine.client.protocol import ShoalClient
    from engine.tasks.results import JSONObject, JSONValue

Args = TypeVar("Args", bound=BaseModel)
# a tool's function, called with the arguments `Tool.parse` gave
Runner = Callable[["ToolContext", BaseModel], Coroutine[object, object, "ToolResult"]]
TaxonomyRef = str | dict[str, object] | list[object]  # a configured taxonomy's name, or one as parsed (checked)


class FunctionSpec(TypedDict):
    """An OpenAI function: its name, what it does, and its arguments' JSON Schema."""

    name: str
    description: str
    parameters: JSONObject


class OpenAITool(TypedDict):
    """One entry of a chat completion request's `tools`."""

    type: Literal["function"]
    function: FunctionSpec


@dataclass(frozen=True)
class Tool:
    """A tool: its name, what it does (for the model reading the schema), its input model and its function."""

    name: str
    description: str
    input: type[BaseModel]
    run: Runner

    def parameters(self) -> JSONObject:
        """The input model as a self-contained JSON Schema object (no $refs, no titles)."""
        return json_schema(self.input)

    def openai(self) -> OpenAITool:
        """The OpenAI function-calling tool entry (`tools=[...]` of a chat completion request)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters()},
        }

    def parse(self, arguments: object) -> BaseModel:
        """Validate arguments; a violation is INVALID_INPUT naming each bad field."""
        if not isinstance(arguments, dict):
            kind = "null" if arguments is None else type(arguments).__name__
            raise InvalidInput(f"{self.name}: arguments must be a JSON object, not {kind}")
        try:
            return self.input.model_validate(arguments)
        except ValidationError as e:
            raise InvalidInput(f"{self.name}: invalid arguments: {describe(e)}") from None


def tool(name: str, input: type[Args]) -> Callable[[Callable[[ToolContext, Args], Awaitable[ToolResult]]], Tool]:
    """Decorator: the function's docstring is the tool's description; it is called with its own input model."""

    def wrap(fn: Callable[[ToolContext, Args], Awaitable[ToolResult]]) -> Tool:
        async def run(ctx: ToolContext, args: BaseModel) -> ToolResult:
            if not isinstance(args, input):
                raise TypeError(
                    f"{name}: arguments must be {input.__name__} (from Tool.parse), not {type(args).__name__}"
                )
            return await fn(ctx, args)

        return Tool(name, " ".join((fn.__doc__ or name).split()), input, run)

    return wrap


def describe(error: ValidationError) -> str:
    """Pydantic's errors as one line: `texts.0: String should have at least 1 character; top_k: ...`."""
    parts = []
    for e in error.errors(include_url=False):
        where = ".".join(str(p) for p in e["loc"]) or "arguments"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def json_schema(model: type[BaseModel]) -> JSONObject:
    """model_json_schema() with $defs inlined and titles dropped: what function-calling APIs expect."""
    schema: JSONObject = model.model_json_schema()  # untyped values in pydantic's own annotation; JSON throughout
    found = schema.pop("$defs", None)
    defs = found if isinstance(found, dict) else {}

    def inline(node: JSONObject) -> JSONObject:
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = copy.deepcopy(defs[ref.rsplit("/", 1)[-1]])
            if not isinstance(target, dict):
                raise TypeError(f"{model.__name__}: schema $ref {ref!r} names no object")
            return inline({**target, **{k: v for k, v in node.items() if k != "$ref"}})
        return {k: walk(v) for k, v in node.items() if k != "title" or not isinstance(v, str)}

    def walk(node: JSONValue) -> JSONValue:
        if isinstance(node, dict):
            return inline(node)
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return inline(schema)


class ToolContext:
    """What a tool call needs: the shoal client, settings, named taxonomies and the taxonomy index cache."""

    def __init__(
        self, client: ShoalClient, settings: ToolSettings | None = None, cache: IndexCache | None = None
    ) -> None:
        self.client = client
        self.settings = settings or ToolSettings()
        self.cache = cache if cache is not None else shared_cache(self.settings)
        self.fits = FitWatch()

    def backend(self) -> ModelBackend:
        """A fresh backend per call, so its counters are that call's model calls."""
        return ModelBackend(self.client, self.settings.batch_size)

    def taxonomy(self, ref: TaxonomyRef) -> Taxonomy:
        """A named taxonomy from the settings (parsed once per file version) or an inline definition."""
        if not isinstance(ref, str):
            return build_taxonomy(ref, self.settings.max_taxonomy_nodes)
        path = self.settings.taxonomies.get(ref)
        if path is None:
            known = ", ".join(sorted(self.settings.taxonomies)) or "none are configured"
            raise TaxonomyError(f"no taxonomy named {ref!r} (known: {known}); or pass the taxonomy itself")
        return taxonomy_file(Path(path).expanduser(), self.settings.max_taxonomy_nodes, ref)

    def fitted_index(self, ref: TaxonomyRef) -> Path | None:
        """The fitted index saved beside a named taxonomy's file (`shoal taxonomy fit`), if there is one."""
        from agent_tools.taxonomy.fit import fitted_path

        path = self.settings.taxonomies.get(ref) if isinstance(ref, str) else None
        if path is None:
            return None
        fitted = fitted_path(Path(path).expanduser())
        return fitted if fitted.is_file() else None

    async def index(self, ref: TaxonomyRef, taxonomy: Taxonomy, backend: ModelBackend, model: str) -> TaxonomyIndex:
        """The index a taxonomy is classified with: a named one's fit as it is now on disk (a fit that cannot
        be used leaves the one served before it, agent_tools/fit_reload.py), else built from the taxonomy."""
        if not isinstance(ref, str):
            return await self.cache.get(taxonomy, backend, model)
        return await self.fits.index(self.cache, ref, taxonomy, backend, model, self.fitted_index(ref))


_FILES: OrderedDict[tuple[str, float, int, int], Taxonomy] = OrderedDict()
_FILES_KEPT = 16
_files_lock = threading.Lock()


def taxonomy_file(path: Path, max_nodes: int, name: str) -> Taxonomy:
    """A taxonomy file parsed once per (path, mtime, size): a small process-wide LRU."""
    try:
        stat = os.stat(path)
    except OSError as e:
        raise TaxonomyError(f"taxonomy {name!r}: cannot read {path}: {e.strerror}") from None
    key = (str(path.resolve()), stat.st_mtime, stat.st_size, max_nodes)
    with _files_lock:
        if key in _FILES:
            _FILES.move_to_end(key)
            return _FILES[key]
    taxonomy = load_taxonomy(path, max_nodes)
    with _files_lock:
        _FILES[key] = taxonomy
        while len(_FILES) > _FILES_KEPT:
            _FILES.popitem(last=False)
    return taxonomy


_SHARED: IndexCache | None = None


def shared_cache(settings: ToolSettings) -> IndexCache:
    """The process-wide taxonomy index cache (the first settings that ask size it)."""
    global _SHARED
    if _SHARED is None:
        _SHARED = IndexCache(settings.taxonomy_cache_size, settings.taxonomy_cache_bytes)
    return _SHARED
