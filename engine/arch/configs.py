"""The typed config every family's backbone carries (`backbone.config`), and reading it off a backbone."""

from __future__ import annotations

from torch import nn

from engine.arch.bert import BertConfig
from engine.arch.decoder import DecoderConfig
from engine.arch.modernbert import ModernBertConfig

BackboneConfig = BertConfig | ModernBertConfig | DecoderConfig


def config_of(backbone: nn.Module) -> BackboneConfig:
    """The backbone's typed config (each family's own class)."""
    config = getattr(backbone, "config", None)
    if not isinstance(config, BertConfig | ModernBertConfig | DecoderConfig):
        raise TypeError(f"{type(backbone).__name__} carries no family config")
    return config
