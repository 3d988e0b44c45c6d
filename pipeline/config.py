"""The pipeline config (YAML or TOML, pydantic-validated) and its fingerprint."""

from __future__ import annotations

import difflib
import hashlib
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from engine.client.retry import RetryPolicy
from engine.tasks.results import JSONValue

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_DB = "lancedb://./shoal-data"
PIPELINE_VERSION = "1"  # bump when parsing/chunking output changes: every source is re-processed

StepKind = Literal["dense", "multivector", "sparse", "entities", "classify"]
DEFAULT_INCLUDE = ["**/*.pdf", "**/*.md", "**/*.markdown", "**/*.html", "**/*.htm", "**/*.txt", "**/*.rst"]


class ConfigError(ValueError):
    """A config (or path) a user gave that cannot run; raised before any work starts. One line."""

    code = "INVALID_CONFIG"
    hint: str | None = None  # one line of what to do, when the code's usual hint does not fit

    def __init__(self, message: str, code: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if hint:
            self.hint = hint


class SourceConfig(BaseModel):
    """Which files the folder walk picks up."""

    model_config = ConfigDict(extra="forbid")

    include: list[str] = Field(default_factory=lambda: list(DEFAULT_INCLUDE))
    exclude: list[str] = Field(
        default_factory=lambda: [".*", "node_modules", "__pycache__"],
        description="globs pruning files and folders (a glob without / matches any name)",
    )
    max_file_mb: float = Field(default=32.0, gt=0, description="larger files are reported, not read")
    invalid_utf8: Literal["fail", "replace"] = Field(
        default="fail", description="a text file that is not valid UTF-8 fails, or decodes with U+FFFD"
    )


class ChunkConfig(BaseModel):
    """Token-counted chunking with the embedding model's own tokenizer."""

    model_config = ConfigDict(extra="forbid")

    target_tokens: int = Field(default=200, ge=16)
    overlap_tokens: int = Field(default=32, ge=0)
    headings: Literal["prepend", "none"] = Field(default="prepend", description="heading path as context")
    tokenizer: str | None = Field(default=None, description="model whose tokenizer counts; default: dense model")

    @model_validator(mode="after")
    def _check(self) -> ChunkConfig:
        if self.overlap_tokens >= self.target_tokens:
            raise ValueError(f"overlap_tokens {self.overlap_tokens} must be below target_tokens {self.target_tokens}")
        return self


class Step(BaseModel):
    """One enrichment step: a task sent through the shoal client API for every chunk."""

    model_config = ConfigDict(extra="forbid")

    kind: StepKind
    model: str
    labels: list[str] = Field(default_factory=list, description="entity or class labels (entities, classify)")
    options: dict[str, JsonValue] = Field(default_factory=dict, description="encode options, e.g. dimensions")
    threshold: float | None = Field(default=None, description="minimum score kept (entities, classify)")

    @model_validator(mode="after")
    def _check(self) -> Step:
        if self.kind in ("entities", "classify") and not self.labels:
            raise ValueError(f"a {self.kind} step needs labels")
        return self


class EngineConfig(BaseModel):
    """Where the tasks go: the in-process engine (no url) or a shoal server / cluster."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    api_key: str | None = None
    batch_size: int = Field(default=64, ge=1, description="chunks per request")
    in_flight: int = Field(default=4, ge=1, description="requests outstanding at once per step")
    retry_attempts: int = Field(
        default=5, ge=1, description="tries per request answered MODEL_LOADING / QUEUE_FULL / RESOURCE_EXHAUSTED"
    )
    retry_max_wait_s: float = Field(
        default=120.0, ge=0, allow_inf_nan=False, description="seconds of Retry-After waiting per request, in all"
    )

    def retry(self) -> RetryPolicy:
        """How the clients the pipeline opens honour the server's Retry-After."""
        return RetryPolicy(attempts=self.retry_attempts, max_wait_s=self.retry_max_wait_s)


class PipelineConfig(BaseModel):
    """Everything an ingest run needs besides the folder: sources, chunking, steps, engine, store."""

    model_config = ConfigDict(extra="forbid")

    db: str = Field(default=DEFAULT_DB, description="store URL; a server URL may name the collection")
    collection: str = Field(default="chunks", pattern=r"^[A-Za-z0-9_\-]+$")
    state: str | None = Field(
        default=None,
        description="where the ingest manifest lives: a folder (SQLite) or 'store' (a side collection in the "
        "store); default: the store's folder for embedded stores, the store itself for servers",
    )
    source: SourceConfig = Field(default_factory=SourceConfig)
    chunking: ChunkConfig = Field(default_factory=ChunkConfig)
    steps: list[Step] = Field(default_factory=lambda: [Step(kind="dense", model=DEFAULT_MODEL)])
    engine: EngineConfig = Field(default_factory=EngineConfig)
    files_in_flight: int = Field(default=8, ge=1, description="documents parsed and enriched concurrently")
    window_chunks: int = Field(
        default=512,
        ge=1,
        description="a large file's chunks are enriched and written this many at a time: what bounds the memory "
        "of one file's vectors and rows, and the step of its progress",
    )
    write_batch_rows: int = Field(default=512, ge=1, description="rows per store write, at most")
    write_interval_s: float = Field(default=2.0, gt=0, description="a write happens at least this often")

    @model_validator(mode="after")
    def _check(self) -> PipelineConfig:
        from connectors.base import StoreError
        from connectors.registry import url_collection

        try:
            named = url_collection(self.db)
        except StoreError:
            named = None  # opening the store reports a bad URL, with its own code
        if named and "collection" in self.model_fields_set and self.collection != named:
            raise ValueError(f"db names collection {named!r} but collection is {self.collection!r}")
        if named:
            self.collection = named
        kinds = [s.kind for s in self.steps]
        if kinds.count("dense") != 1:
            raise ValueError("the pipeline needs exactly one dense step (it is what search uses)")
        for kind in ("multivector", "sparse", "entities", "classify"):
            if kinds.count(kind) > 1:
                raise ValueError(f"at most one {kind} step")
        return self

    @property
    def dense(self) -> Step:
        return next(s for s in self.steps if s.kind == "dense")

    def step(self, kind: StepKind) -> Step | None:
        return next((s for s in self.steps if s.kind == kind), None)

    def fingerprint(self, model_infos: Mapping[str, Mapping[str, JSONValue]] | None = None) -> str:
        """Hash of everything that shapes the stored chunks: chunking, steps, model versions, code version."""
        shaping = {
            "version": PIPELINE_VERSION,
            "chunking": self.chunking.model_dump(),
            "steps": [s.model_dump() for s in self.steps],
            "invalid_utf8": self.source.invalid_utf8,
            "models": {
                m: {k: v for k, v in (info or {}).items() if k in ("name", "dims", "max_sequence_length", "revision")}
                for m, info in sorted((model_infos or {}).items())
            },
        }
        return hashlib.sha256(json.dumps(shaping, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_config(path: Path | str | None = None, **overrides: object) -> PipelineConfig:
    """Read a YAML or TOML config (or the defaults), apply non-None overrides, validate."""
    data: dict[str, object] = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
            data = (tomllib.loads(text) if p.suffix == ".toml" else yaml.safe_load(text)) or {}
        except (OSError, tomllib.TOMLDecodeError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read pipeline config {p}: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"pipeline config {p} must be a mapping at the top level")
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"invalid pipeline config{f' {path}' if path else ''}: {validation_summary(e)}") from e


def validation_summary(e: ValidationError, root: type[BaseModel] = PipelineConfig) -> str:
    """A pydantic error as one line: `where: what` per problem; an unknown key says which it may have meant."""
    parts = []
    for err in e.errors():
        loc = tuple(err.get("loc", ()))
        where = ".".join(str(x) for x in loc) or "config"
        what = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden" and loc and isinstance(loc[-1], str):
            known = keys_at(root, loc[:-1])
            close = difflib.get_close_matches(loc[-1].lower(), known, n=1, cutoff=0.6)
            what = f"unknown key (did you mean {close[0]!r}?)" if close else f"unknown key; known: {', '.join(known)}"
        parts.append(f"{where}: {what}")
    return "; ".join(parts)


def keys_at(root: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The keys the config section at `loc` takes (list indexes skipped), e.g. ("steps", 0) -> Step's."""
    model: type[BaseModel] = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        inner = [a for a in (field.annotation, *get_args(field.annotation)) if isinstance(a, type)]
        nested = next((a for a in inner if issubclass(a, BaseModel)), None)
        if nested is None:
            return []
        model = nested
    return list(model.model_fields)
