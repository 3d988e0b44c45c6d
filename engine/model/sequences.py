"""Tokenised inputs as a backbone reads them, and the token ids a late-interaction card needs."""

from __future__ import annotations

import string
from dataclasses import dataclass, field

from engine.catalogue.cards import ModelCard, MultivectorSpec
from engine.errors import ModelLoadFailed
from engine.model.tokenizer import TextTokenizer


@dataclass
class Encoded:
    """One tokenised input as the backbone reads it."""

    ids: list[int]
    type_ids: list[int] | None = None  # segment ids of a (query, document) pair
    keys: int | None = None  # leading tokens that serve as attention keys (ColBERT expansion); None: all
    query: bool = False
    lora: str | None = None  # LoRA adapter applied to this sequence; None: the base model


@dataclass
class LateInteraction:
    """Token ids a multivector card needs: markers, the expansion token, the documents' skip-list."""

    spec: MultivectorSpec
    query_marker: int | None = None
    document_marker: int | None = None
    mask: int | None = None
    skip: set[int] = field(default_factory=set)

    def mark(self, ids: list[int], is_query: bool) -> Encoded:
        """Insert the query/document marker after [CLS]; pad queries to their fixed length with [MASK]."""
        marker = self.query_marker if is_query else self.document_marker
        s = ids[:1] + [marker] + ids[1:] if marker is not None else ids
        keys = None
        n = self.spec.query_length
        if is_query and n and self.mask is not None:
            s = s if len(s) <= n else s[: n - 1] + s[-1:]  # keep the closing special token
            keys = None if self.spec.attend_to_expansion else len(s)
            s = s + [self.mask] * (n - len(s))
        return Encoded(s, keys=keys, query=is_query)


def late_interaction(card: ModelCard, tokenizer: TextTokenizer) -> LateInteraction | None:
    """The marker, [MASK] and skip-list ids of a multivector card (a load failure when the tokenizer lacks them)."""
    spec = card.multivector
    if spec is None:
        return None
    late = LateInteraction(spec)
    for attr in ("query_marker", "document_marker"):
        token = getattr(spec, attr)
        if token is not None:
            if tokenizer.token_id(token) is None:
                raise ModelLoadFailed(f"{card.id}: the tokenizer has no {attr} token {token!r}")
            setattr(late, attr, tokenizer.token_id(token))
    if spec.query_length:
        late.mask = next(
            (tokenizer.token_id(t) for t in ("[MASK]", "<mask>") if tokenizer.token_id(t) is not None), None
        )
        if late.mask is None:
            raise ModelLoadFailed(f"{card.id}: query expansion needs a [MASK] token and the tokenizer has none")
    chars = string.punctuation if spec.skiplist == "punctuation" else spec.skiplist
    late.skip = {i for i in map(tokenizer.token_id, chars) if i is not None}
    return late
