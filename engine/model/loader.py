"""Loading a model: the loader of each family, and a one-call load for callers outside residency."""

from __future__ import annotations

from collections.abc import Callable

from engine.arch.configs import config_of
from engine.catalogue.cards import ModelCard
from engine.catalogue.weights import resolve_weights
from engine.model.checkpoint import FAMILIES, load_modules
from engine.model.gliner_runtime import load_gliner
from engine.model.heads import CardHeads
from engine.model.loaded import LoadedModel, LoadSpec
from engine.model.lora import AdapterCache
from engine.model.packed import PackedModel
from engine.model.precision import device_profile
from engine.model.quantize import quantize_linears
from engine.model.sequences import late_interaction
from engine.model.tokenizer import TextTokenizer, load_tokenizer


def load_packed(spec: LoadSpec) -> PackedModel:
    """One of our backbones: build it and the card's heads, load the weights and the tokenizer."""
    card, folder = spec.card, spec.folder
    backbone, heads = load_modules(card.family, folder, spec.device, spec.precision.dtype, card.heads())
    if spec.precision.quantized:
        quantize_linears(backbone)
    max_len = min(card.max_seq_len, config_of(backbone).max_len)  # every family's backbone carries its config
    markers = card.multivector is not None and bool(card.multivector.query_marker or card.multivector.document_marker)
    tokenizer = TextTokenizer(load_tokenizer(folder, max_len - int(markers)), max_len)
    late = late_interaction(card, tokenizer)
    return PackedModel(
        card=card,
        tokenizer=tokenizer,
        backbone=backbone,
        heads=CardHeads(card, heads, tokenizer, late),
        device=spec.device,
        precision=spec.precision,
        adapters=spec.adapters,
        late=late,
    )


# family -> how to load it; every family built in engine/arch is a packed backbone. A model run by another
# package adds its family here with its own loader.
LOADERS: dict[str, Callable[[LoadSpec], LoadedModel]] = {family: load_packed for family in FAMILIES}
LOADERS["gliner"] = load_gliner  # run by the `gliner` package, imported only when such a model loads


def load(spec: LoadSpec) -> LoadedModel:
    """Load a model whose weights are already resolved (residency's loader)."""
    return LOADERS[spec.card.family](spec)


def load_model(
    card: ModelCard,
    device: str = "cpu",
    offline: bool | None = None,
    adapters: AdapterCache | None = None,
    precision: str | None = None,
) -> PackedModel:
    """Resolve the weights and load one of our backbones, outside residency (tests, tuning, benchmarks), in
    `precision` when given (else the device's profile)."""
    cache = AdapterCache() if adapters is None else adapters
    profile = device_profile(card, device, precision)
    return load_packed(LoadSpec(card, resolve_weights(card, offline), device, profile, cache))
