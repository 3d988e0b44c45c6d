"""Model cards: the declarative, pydantic-validated description of one servable model."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.errors import InvalidInput

TaskKind = Literal["encode", "score", "extract"]
OutputType = Literal["dense", "sparse", "multivector", "score", "entities", "classifications"]
Pooling = Literal["cls", "mean", "last"]
Family = Literal["bert", "xlm_roberta", "modernbert", "qwen3", "llama", "gliner"]
Precision = Literal["float32", "float16", "bfloat16", "int8"]  # how the weights run (engine/model/precision.py)
PRECISIONS: tuple[str, ...] = get_args(Precision)


class WeightSource(BaseModel):
    """Where the weights may come from, tried in order: path, HF cache, package, hub."""

    model_config = ConfigDict(extra="forbid")

    path: Path | None = None
    hf_repo: str | None = None
    revision: str | None = None
    package: str | None = Field(default=None, description="installed Python package shipping the weights")
    package_subdir: str = ""


class Profile(BaseModel):
    """Batching settings for one device kind."""

    model_config = ConfigDict(extra="forbid")

    max_batch_tokens: int = 8192
    max_batch_items: int = 256
    dtype: Precision = Field(
        default="float32",
        description="precision; int8 quantises the linear layers (CPU). See engine/model/precision.py",
    )
    lora: str | None = Field(
        default=None, description="LoRA adapter (a name in the card's `loras`) this profile applies"
    )
    auto_tune: bool | None = Field(
        default=None,
        description="unset or true: float32 here may be replaced by a faster precision that passes the quality "
        "gate; false keeps `dtype` as written",
    )


class MultivectorSpec(BaseModel):
    """Token vectors (ColBERT / BGE-M3 late interaction): projection, markers, expansion, skip-list."""

    model_config = ConfigDict(extra="forbid")

    dim: int | None = Field(default=None, description="token vector size; None keeps the hidden size")
    projection: bool = Field(default=True, description="a learned linear map to `dim` (colbert head)")
    bias: bool = False
    query_marker: str | None = Field(default=None, description="token inserted after [CLS] of queries, e.g. [unused0]")
    document_marker: str | None = Field(default=None, description="token inserted after [CLS] of documents")
    query_length: int = Field(default=0, ge=0, description="pad queries to this length with [MASK] (0: no expansion)")
    attend_to_expansion: bool = Field(default=False, description="let other tokens attend to the [MASK] padding")
    skiplist: str = Field(
        default="", description="characters whose tokens are dropped from documents; 'punctuation' = string.punctuation"
    )
    skip_first: bool = Field(default=False, description="drop the first token's vector (BGE-M3 drops [CLS])")
    normalize: bool = True


class SparseSpec(BaseModel):
    """Sparse lexical weights: SPLADE (MLM head, log(1+relu), max pooling) or BGE-M3 (per-token weight)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["splade", "bge_m3"] = "splade"
    vocab_size: int | None = None
    top_k: int | None = Field(default=None, ge=1, description="keep only the k largest weights")


class ScoreSpec(BaseModel):
    """How score(query, items) is computed: a cross-encoder head, a yes/no LM, or MaxSim over multivectors."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["classifier", "yes_no", "maxsim"]
    activation: Literal["sigmoid", "none"] = Field(default="sigmoid", description="on the classifier logit")
    label: int = Field(default=-1, description="which label's logit is the relevance (num_labels > 1)")
    # yes_no (Qwen3-Reranker): prompt = prefix + template(instruction, query, document) + suffix
    prefix: str = ""
    template: str = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
    suffix: str = ""
    instruction: str = "Given a web search query, retrieve relevant passages that answer the query"
    yes_token: str = "yes"
    no_token: str = "no"


class ExtractSpec(BaseModel):
    """How `extract` runs: GLiNER spans over word windows, or zero-shot classification by NLI entailment.

    Any card with dense output also extracts (classifications by embedding similarity) without this section.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["gliner", "nli"] = "gliner"
    threshold: float = Field(default=0.5, ge=0.0, le=1.0, description="default minimum score of what is returned")
    window_words: int | None = Field(
        default=None, ge=8, description="gliner: words per window of a long text; None: the model's own max_len"
    )
    overlap_words: int = Field(default=48, ge=0, description="gliner: words two consecutive windows share")
    template: str = Field(default="This example is {label}.", description="nli: the hypothesis a label fills")
    entailment_label: int = Field(default=0, ge=0, description="nli: index of the entailment logit")
    contradiction_label: int = Field(default=2, ge=0, description="nli: index of the contradiction logit")

    @model_validator(mode="after")
    def _check(self) -> ExtractSpec:
        if "{label}" not in self.template:
            raise ValueError("extract.template must contain '{label}'")
        if self.kind == "nli" and self.entailment_label == self.contradiction_label:
            raise ValueError("extract: entailment_label and contradiction_label must differ")
        return self


class ModelCard(BaseModel):
    """One model: what it is, where its weights are, what it computes and how to batch it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    family: Family = "bert"
    description: str = ""
    source: WeightSource = Field(default_factory=WeightSource)
    tasks: list[TaskKind] = ["encode"]  # pydantic copies mutable defaults per instance
    outputs: list[OutputType] = ["dense"]
    dense_dim: int | None = None
    pooling: Pooling = "mean"
    normalize: bool = True
    matryoshka_dims: list[int] = Field(default_factory=list, description="dims the model was trained for")
    max_seq_len: int = 512
    truncate: bool = Field(default=True, description="truncate over-long input unless the request says not")
    query_instruction: str | None = None
    document_instruction: str | None = None
    profiles: dict[str, Profile] = Field(default_factory=lambda: {"default": Profile()})
    loras: dict[str, str] = Field(default_factory=dict, description="LoRA adapters: name -> PEFT adapter folder")
    pinned: bool = Field(default=False, description="keep resident on the device: never evicted")
    multivector: MultivectorSpec | None = None
    sparse: SparseSpec | None = None
    score: ScoreSpec | None = None
    extract: ExtractSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelCard:
        if self.family == "gliner":  # a GLiNER model only extracts entities
            self.extract = self.extract or ExtractSpec()
            if self.extract.kind != "gliner" or self.tasks != ["extract"]:
                raise ValueError("a gliner card has tasks [extract] and an extract section of kind gliner")
        elif self.extract is not None and self.extract.kind == "gliner":
            raise ValueError(f"extract kind gliner needs family gliner, not {self.family}")
        if self.extract is not None and "extract" not in self.tasks:
            raise ValueError("a card with an extract section lists 'extract' in its tasks")
        if "multivector" in self.outputs and self.multivector is None:
            raise ValueError("outputs include multivector: the card needs a 'multivector' section")
        if "sparse" in self.outputs and self.sparse is None:
            raise ValueError("outputs include sparse: the card needs a 'sparse' section")
        if "score" in self.tasks and self.score is None:
            raise ValueError("tasks include score: the card needs a 'score' section")
        if self.score is not None and self.score.kind == "maxsim" and self.multivector is None:
            raise ValueError("maxsim scoring needs a 'multivector' section")
        if "default" not in self.profiles:
            raise ValueError("a card needs a 'default' profile")
        for name, p in self.profiles.items():
            if p.max_batch_tokens < self.max_seq_len:
                raise ValueError(
                    f"profile {name!r}: max_batch_tokens {p.max_batch_tokens} is below max_seq_len "
                    f"{self.max_seq_len}; one full-length input would never fit a batch"
                )
        return self

    def heads(self) -> dict[str, dict[str, object]]:
        """The checkpoint heads this card uses (name -> arguments for the loader)."""
        heads: dict[str, dict[str, object]] = {}
        mv = self.multivector
        if mv is not None and mv.projection:
            heads["colbert"] = {"dim": mv.dim, "bias": mv.bias}
        if self.sparse is not None:
            heads["mlm" if self.sparse.kind == "splade" else "m3_sparse"] = {}
        if self.score is not None and self.score.kind in ("classifier", "yes_no"):
            heads[self.score.kind] = {}
        if self.extract is not None and self.extract.kind == "nli":
            heads["classifier"] = {}
        return heads

    def profile(self, name: str | None) -> Profile:
        if name is None:
            return self.profiles["default"]
        if name not in self.profiles:
            raise InvalidInput(f"model {self.id!r} has no profile {name!r}; it has {sorted(self.profiles)}")
        return self.profiles[name]

    def prefix(self, is_query: bool, instruction: str | None = None) -> str:
        """What an encoded text is prefixed with: the request's instruction, else the card's query or document
        instruction (engine.tasks.annotate resolves a request's with this; the quality gate runs with it too)."""
        card_prefix = self.query_instruction if is_query else self.document_instruction
        return (instruction if instruction is not None else card_prefix) or ""
