"""Engine settings, typed and read in one place (arguments, then SHOAL_* environment variables)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ByteSize, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[list[str], NoDecode]  # SHOAL_X="a,b" (or a JSON list) in the environment


class EngineSettings(BaseSettings):
    """Every knob of the engine and gateway; `SHOAL_<NAME>` overrides a default."""

    model_config = SettingsConfigDict(env_prefix="SHOAL_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    device: str = "cpu"
    threads: int | None = Field(
        default=None, ge=1, description="torch intra-op and tokenizer threads; None: the cores this process may use"
    )
    idle_release_s: float = Field(
        default=5.0, ge=0, description="an idle worker returns freed memory to the OS after this; 0: never"
    )
    max_items: int = Field(
        default=2048, ge=1, description="most items one HTTP request may carry (OpenAI's own limit is 2,048)"
    )
    stream_chunk_items: int = Field(
        default=256, ge=1, description="in-process calls over this many items go to the queue in chunks this size"
    )
    stream_window: int = Field(default=4, ge=1, description="chunks of one large call in flight at once")
    max_body_bytes: int = Field(default=32 * 1024 * 1024, description="largest accepted request body")
    max_item_chars: int = Field(default=200_000, description="longest text of one item, before tokenizing")
    # limits on one request (docs/security.md), each checked before the work it bounds
    max_instruction_chars: int = Field(default=4096, description="longest instruction (it prefixes every item)")
    max_request_tokens: int = Field(
        default=1_000_000, description="most estimated tokens (characters / 4) in one request, prefixes included"
    )
    max_labels: int = Field(default=256, description="most labels one extract request may name")
    max_label_chars: int = Field(default=256, description="longest label (or label description) of an extract request")
    # extract (engine/tasks/extract.py): GLiNER windows long texts, so one entity item may be far longer than encode's
    max_extract_chars: int = Field(default=8_000_000, description="longest text of one entity-extraction item")
    max_extract_pairs: int = Field(default=32_768, description="most (item, label) pairs of one NLI request")
    max_id_chars: int = Field(default=512, description="longest item id")
    max_model_id_chars: int = Field(default=512, description="longest model id or LoRA adapter name")
    max_body_depth: int = Field(default=32, description="deepest nesting of lists and maps in a request body")
    max_body_list: int = Field(
        default=65_536, description="longest list or map anywhere in a body (item lists: max_items)"
    )
    invalid_text: Literal["reject", "replace"] = Field(
        default="reject", description="text with lone surrogates: 400 (reject) or each one made U+FFFD (replace)"
    )
    # the HTTP server (engine/http/server.py, connections.py)
    head_timeout_s: float = Field(default=10.0, description="a request's line and headers must arrive within this")
    body_timeout_s: float = Field(default=60.0, description="a request's body must arrive within this (408 after)")
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, description="a request head over this is 431")
    keep_alive_s: float = Field(
        default=120.0,
        description="an idle keep-alive connection is closed after this (longer than client pools keep one)",
    )
    max_connections: int = Field(
        default=1024, description="open connections; past it the longest-idle one is closed (capped by ulimit -n)"
    )
    health_connections: int = Field(
        default=16, description="connections kept for /healthz and /readyz when every other one is busy"
    )
    offload_bytes: int = Field(default=64 * 1024, description="bodies larger than this are decoded off the event loop")
    # gateway security (engine/http/auth.py); a malformed key configuration refuses to start
    api_key: str | None = Field(
        default=None, description="API key(s), comma-separated; requests need 'Authorization: Bearer KEY'"
    )
    api_keys_file: Path | None = Field(default=None, description="file of API keys, one per line ('#' comments)")
    rate_limit_per_s: float | None = Field(default=None, gt=0, description="requests per second per API key")
    rate_limit_burst: int | None = Field(default=None, ge=1, description="requests a key may burst; None: 2x rate")
    cors_origins: CommaList = Field(default_factory=list, description="origins allowed by CORS; none: CORS off")
    metrics_key: str | None = Field(default=None, description="when set, GET /metrics needs 'Bearer METRICS_KEY'")
    metrics_port: int | None = Field(default=None, description="serve /metrics on this port only, not the API port")
    # where models may come from (engine/catalogue/catalogue.py)
    local_models: bool = Field(
        default=True, description="model ids may be local folders; on for the SDK, off for serve and worker"
    )
    model_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="folders whose checkpoint sub-folders are served by relative name"
    )
    batch_wait_ms: float = Field(
        default=2.0,
        description="longest a worker lingers to fill a batch while callers overlap (a lone caller never waits)",
    )
    max_batch_tokens: int | None = Field(default=None, description="override every card's token budget")
    request_timeout_s: float = Field(default=300.0, description="deadline given to each request")
    # admission control of network requests (engine/queue/admission.py); the SDK's own calls are not shed
    admission_wait_s: float = Field(
        default=0.1,
        ge=0,
        description="admit as many network requests per model as it answers in this many seconds; 0: no limit",
    )
    admission_min_in_flight: int = Field(default=32, ge=1, description="requests per model always admitted")
    admission_max_in_flight: int = Field(default=4096, ge=1, description="most requests per model in flight")
    # compatible routes (docs/compatibility.md): the models of routes whose requests name none (TEI, POST /)
    default_model: str = Field(
        default="sentence-transformers/all-MiniLM-L6-v2", description="embedder of TEI routes without 'model'"
    )
    default_rerank_model: str = Field(
        default="cross-encoder/ms-marco-MiniLM-L-6-v2", description="reranker of TEI /rerank and /predict"
    )
    token_ids: Literal["cl100k_base", "model"] = Field(
        default="cl100k_base",
        description="how /v1/embeddings reads token-id input: tiktoken's cl100k_base ids (what langchain-openai "
        "and other OpenAI clients send), or the model's own tokenizer's ids",
    )
    model_dir: Path | None = Field(default=None, description="extra folder of model cards (*.yaml)")
    preload: list[str] = Field(default_factory=list, description="models loaded at start-up")
    offline: bool | None = Field(default=None, description="never download; None follows HF_HUB_OFFLINE")
    # residency (engine/residency.py): tiers, budgets, waits; LoRA adapters; tuned profiles
    device_budget: ByteSize | None = Field(
        default=None, description="bytes of models on the device ('4GB'); None: 80% of it"
    )
    host_budget: ByteSize | None = Field(
        default=None, description="bytes of demoted models in host RAM; None: 25% of RAM"
    )
    load_wait_s: float = Field(default=30.0, description="how long a request waits for its model to load before a 503")
    evict_wait_s: float = Field(default=30.0, description="how long a load waits for in-use models to free room")
    idle_ttl_s: float | None = Field(default=None, description="demote (then drop) models unused this long")
    pin: list[str] = Field(default_factory=list, description="models kept resident on the device, never evicted")
    lora_dir: Path | None = Field(default=None, description="folder of PEFT LoRA adapters, one sub-folder per name")
    lora_folders: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="adapter folders served by their path even with local folders off (tuned taxonomies' adapters)",
    )
    lora_cache_size: int = Field(default=16, description="LoRA adapters kept loaded (LRU)")
    auto_tune: bool = Field(
        default=True,
        description="on a model's first load on a device kind, gate every precision the device offers in the "
        "background (float32 serves meanwhile) and switch to the fastest that passes; 0: float32 until `shoal tune`",
    )
    auto_tune_budget_s: float = Field(
        default=60.0, gt=0, description="no further precision is tried once the background gate has run this long"
    )
    precision: Literal["float32", "float16", "bfloat16", "int8"] | None = Field(
        default=None, description="pin every model to this precision (no auto-tune); None: tuned or card's choice"
    )
    cpu_kernels: bool = Field(
        default=True,
        description="shoal's own bfloat16 attention and LayerNorm kernels on CPUs with AVX512-BF16 (built once per "
        "machine with the system's C++ compiler, kept in kernel_cache); 0: torch's attention and LayerNorm",
    )
    kernel_cache: Path = Field(
        default=Path("~/.cache/shoal/kernels").expanduser(), description="where built CPU kernels are kept"
    )
    profile_store: Path = Field(
        default=Path("~/.cache/shoal/profiles.json").expanduser(), description="tuned profiles per (model, device)"
    )
    # distributed mode (engine/nats_queue.py): a NATS JetStream work queue instead of the in-process one
    queue_url: str | None = Field(
        default=None, description="nats://host:port, or a comma-separated list of a cluster's nodes; None: in-process"
    )
    queue_replicas: int = Field(
        default=1, ge=1, le=5, description="copies of the work and dead-letter streams (3 on a cluster)"
    )
    queue_stream: str = Field(default="SHOAL_WORK", description="work-queue stream (subjects shoal.work.<model>)")
    queue_dead_stream: str = Field(default="SHOAL_DEAD", description="dead-letter stream (subjects shoal.dead.>)")
    queue_ack_wait_s: float = Field(default=30.0, description="a pulled task not acked within this is redelivered")
    queue_max_deliver: int = Field(default=5, description="deliveries of one task before it is dead-lettered")
    queue_pending_limit: int = Field(default=10_000, description="pending tasks past which the gateway says 503")
    queue_pending_refresh_s: float = Field(default=0.25, description="how often the gateway re-reads the pending count")
    queue_idle_poll_s: float = Field(default=1.0, description="an idle worker re-checks the stream at least this often")
    queue_ping_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="how often each NATS connection pings its server; two unanswered pings (a node cut off) and it "
        "moves to another node of the list",
    )
    queue_worker_wait_s: float = Field(
        default=0.0,
        ge=0,
        description="with no worker pulling a model, 0 answers its requests 503 NO_WORKER at once; more publishes "
        "them and waits this long for one to appear (a pool scaled to zero, woken by its backlog)",
    )
    queue_locality: bool = Field(
        default=True, description="workers pull their resident models' tasks first; off: the fullest subject first"
    )
    worker_models: list[str] | None = Field(default=None, description="models a worker may serve; None: any")

    @field_validator("cors_origins", "model_roots", "lora_folders", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            import json

            return json.loads(v) if v.lstrip().startswith("[") else [p.strip() for p in v.split(",") if p.strip()]
        return v
