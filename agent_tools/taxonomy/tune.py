"""Tune the embedding model to a taxonomy's labelled texts: a LoRA adapter trained contrastively, saved as PEFT.

Each labelled text is pulled towards its leaf's text ("path: description") and away from the other leaves'
texts in its batch (in-batch negatives, a softmax over cosines at `scale`; a leaf that appears twice in a
batch is not its own negative). Only the low-rank pairs on the attention and feed-forward layers learn; the
model stays as it is, so the engine applies the adapter per request like any other (engine/model/lora.py).
The training runs on transformers' implementation of the model, in float32, on this machine's CPU threads;
its cost is linear in the labelled texts (`epochs` passes over them) up to `max_examples` pairs seen, then
constant. The rank, learning rate and epochs were chosen on bench/data/taxonomy/support with one labelled
text per leaf.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent_tools.errors import InvalidInput

if TYPE_CHECKING:
    import torch
    from rich.progress import Progress as ProgressBar
    from torch import nn

TARGETS = ("query", "key", "value", "dense")  # BERT's attention projections and feed-forward layers

Progress = Callable[[int, int], None]  # (steps done, steps in all)
Tuner = Callable[[list["Pair"], int | None], Awaitable[str]]  # (pairs, fold; None: all texts) -> adapter folder


@dataclass(frozen=True)
class TuneOptions:
    """How the adapter is trained (chosen on the `support` set; see the module docstring)."""

    rank: int = 8
    alpha: float = 16.0
    epochs: int = 10
    learning_rate: float = 5e-4
    batch_size: int = 32
    scale: float = 20.0  # cosine -> logit
    max_tokens: int = 128
    max_examples: int = 5000  # pairs seen in all: past it, fewer passes (a fit of 20,000 texts tunes in minutes)
    seed: int = 0


@dataclass(frozen=True)
class Encoder:
    """The model to tune as the engine runs it: its weights folder, pooling and the card's input prefixes."""

    folder: Path
    pooling: str = "mean"
    query_prefix: str = ""  # put before a labelled text (the engine embeds texts as queries)
    document_prefix: str = ""  # put before a leaf's text (node texts are embedded as documents)


@dataclass(frozen=True)
class Pair:
    """One labelled text, the text of its leaf, and the leaf (so a batch never treats it as a negative)."""

    text: str
    target: str
    leaf: int


def adapter_folder(fitted: Path) -> Path:
    """Where a fitted index's tuned adapter lives, beside it: `shop.fit.npz` -> `shop.fit.lora/`."""
    return fitted.with_name(fitted.name.removesuffix(".npz") + ".lora")


LowRankPair = tuple["nn.Parameter", "nn.Parameter"]  # (A [rank, in], B [out, rank])


def _add_delta(a: nn.Parameter, b: nn.Parameter, scale: float) -> Callable[..., torch.Tensor]:
    """A forward hook adding x A^T B^T * scale to a Linear's output."""

    def hook(_: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
        return out + (inputs[0] @ a.T @ b.T) * scale  # [..., out]

    return hook


def _attach(model: nn.Module, options: TuneOptions) -> dict[str, LowRankPair]:
    """Freeze the model and give every target Linear of its encoder layers a trainable low-rank delta, added
    by a forward hook (as the engine applies adapters): y = base(x) + alpha / rank * x A^T B^T, B starting at
    zero. {module path: (A, B)}."""
    import torch
    from torch import nn

    for p in model.parameters():
        p.requires_grad_(False)
    scale = options.alpha / options.rank
    wrapped: dict[str, LowRankPair] = {}
    for path, module in model.named_modules():
        name = path.rsplit(".", 1)[-1]
        if name in TARGETS and isinstance(module, nn.Linear) and ".layer." in f".{path}":
            a = nn.Parameter(torch.randn(options.rank, module.in_features) / math.sqrt(module.in_features))
            b = nn.Parameter(torch.zeros(module.out_features, options.rank))
            module.register_forward_hook(_add_delta(a, b, scale))
            wrapped[path] = (a, b)
    if not wrapped:
        raise InvalidInput(f"tuning needs a BERT-style encoder (Linear layers named {', '.join(TARGETS)})")
    return wrapped


def _embed(model: nn.Module, tokenizer: object, texts: Sequence[str], pooling: str, max_tokens: int) -> torch.Tensor:
    """Unit sentence vectors [n, dim] with the card's pooling (mean over tokens, or the first token)."""
    import torch

    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")  # type: ignore[operator]
    hidden = model(**batch).last_hidden_state  # [n, tokens, dim]
    if pooling == "cls":
        pooled = hidden[:, 0]
    else:
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [n, tokens, 1]
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
    return torch.nn.functional.normalize(pooled, dim=-1)  # [n, dim]


def _batches(pairs: list[Pair], options: TuneOptions) -> list[list[Pair]]:
    """`epochs` shuffled passes over the pairs, cut at `max_examples` pairs in all, in batches."""
    order = random.Random(options.seed)
    seen: list[Pair] = []
    for _ in range(options.epochs):
        shuffled = pairs[:]
        order.shuffle(shuffled)
        seen += shuffled
        if len(seen) >= options.max_examples:
            break
    seen = seen[: options.max_examples]
    return [seen[i : i + options.batch_size] for i in range(0, len(seen), options.batch_size)]


def _loss(
    model: nn.Module, tokenizer: object, encoder: Encoder, batch: list[Pair], options: TuneOptions
) -> torch.Tensor:
    """In-batch contrastive loss: each text's own leaf text against the batch's other leaf texts."""
    import torch

    texts = [encoder.query_prefix + p.text for p in batch]
    targets = [encoder.document_prefix + p.target for p in batch]
    queries = _embed(model, tokenizer, texts, encoder.pooling, options.max_tokens)  # [b, dim]
    leaves = _embed(model, tokenizer, targets, encoder.pooling, options.max_tokens)  # [b, dim]
    logits = queries @ leaves.T * options.scale  # [b, b]: text i against leaf text j
    leaf = torch.tensor([p.leaf for p in batch])
    twin = (leaf[:, None] == leaf[None, :]) & ~torch.eye(len(batch), dtype=torch.bool)
    logits = logits.masked_fill(twin, float("-inf"))  # the same leaf elsewhere in the batch: no negative
    return torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)))


def tune_adapter(
    encoder: Encoder,
    pairs: list[Pair],
    out: Path,
    options: TuneOptions = TuneOptions(),
    progress: Progress | None = None,
) -> Path:
    """Train a LoRA adapter of the encoder's model on the pairs and save it to `out` in PEFT's format."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    folder, pooling = encoder.folder, encoder.pooling
    if pooling not in ("mean", "cls"):
        raise InvalidInput(f"tuning supports mean or first-token pooling, not {pooling!r}")
    if len(pairs) < 2:
        raise InvalidInput("tuning needs at least 2 labelled texts filed under leaves")
    torch.manual_seed(options.seed)
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # the CLI shows its own progress
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder)).float()  # trained in float32, whatever the checkpoint holds
    wrapped = _attach(model, options)
    optimizer = torch.optim.AdamW([p for pair in wrapped.values() for p in pair], lr=options.learning_rate)
    batches = _batches(pairs, options)
    model.train()
    for done, batch in enumerate(batches, 1):
        loss = _loss(model, tokenizer, encoder, batch, options)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        if progress is not None:
            progress(done, len(batches))
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for path, (a, b) in wrapped.items():
        tensors[f"base_model.model.{path}.lora_A.weight"] = a.detach().contiguous()
        tensors[f"base_model.model.{path}.lora_B.weight"] = b.detach().contiguous()
    save_file(tensors, str(out / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "r": options.rank,
        "lora_alpha": options.alpha,
        "target_modules": rf".*\.layer\.\d+\..*\.({'|'.join(TARGETS)})$",  # peft: the encoder layers' only
        "bias": "none",
        "fan_in_fan_out": False,
        "base_model_name_or_path": str(folder),
        "task_type": "FEATURE_EXTRACTION",
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=1))
    return out


def local_tuner(encoder: Encoder, work: Path, bar: ProgressBar | None = None) -> Tuner:
    """A Tuner that trains adapters of the encoder's model under `work`, with a progress bar each."""
    import asyncio

    async def tuner(pairs: list[Pair], fold: int | None) -> str:
        out = work / ("all" if fold is None else f"fold-{fold + 1}")
        if bar is None:
            return str(await asyncio.to_thread(tune_adapter, encoder, pairs, out))
        task = bar.add_task("tuning on all texts" if fold is None else f"tuning fold {fold + 1}", total=None)

        def step(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        try:
            return str(await asyncio.to_thread(tune_adapter, encoder, pairs, out, progress=step))
        finally:
            bar.remove_task(task)

    return tuner
