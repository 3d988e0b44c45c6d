"""GlinerModel: a GLiNER checkpoint run by the `gliner` package, behind the narrow interface the extract handler uses.

The handler may split a text into GLiNER's words (`words`), count their tokens (`token_counts`, `prompt_tokens`)
and run many windows with their own labels and switches in one batched call (`predict`). Residency sees the
LoadedModel protocol: card, device, precision, max_len, tensor bytes, move_to.

`gliner` is imported only when a GLiNER model loads. Weights come from `model.safetensors`, or from the
`pytorch_model.bin` GLiNER's own `save_pretrained` writes, read with `torch.load(weights_only=True)`: a
pickle that would build anything but tensors is refused. No remote code runs and nothing is downloaded
for a folder that carries its tokenizer and its encoder's config.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file
from torch import Tensor

from engine.catalogue.cards import ModelCard
from engine.catalogue.inference import read_object
from engine.errors import InvalidInput, ModelLoadFailed
from engine.model import memory
from engine.model.loaded import LoadSpec
from engine.model.precision import DeviceProfile, device_profile, supported
from engine.model.quantize import quantize_linears

if TYPE_CHECKING:  # the types only: transformers is imported when a GLiNER model loads
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

GLINER_VERSION = "0.2.29"  # the release this runtime is written against (the `gliner` extra installs it)
SERVED = ("UniEncoderSpanGLiNER", "UniEncoderTokenGLiNER", "BiEncoderSpanGLiNER", "BiEncoderTokenGLiNER")
MAX_TOKENS = 512  # when neither the encoder's config nor its tokenizer says how long an input may be
WORD_CACHE = 65_536  # words whose token counts are kept (cleared when full: bounded, whatever the traffic)
CACHED_WORD_CHARS = 64  # longer words (rare; a text with no spaces is one word) are counted afresh each time
PROMPT_CACHE = 256  # label lists whose prompt lengths are kept (oldest dropped first)
CACHED_PROMPT_CHARS = 4096  # label lists longer than this in all are counted afresh each time
Word = tuple[str, int, int]  # a word and its character offsets [start, end) in the text


@dataclass(frozen=True)
class Window:
    """Words GLiNER reads in one row of a batch, with that row's labels and decoding switches."""

    words: list[str]
    labels: tuple[str, ...]
    threshold: float
    flat_ner: bool
    multi_label: bool


@dataclass(frozen=True)
class Span:
    """One decoded entity of a window: first and last word (inclusive, window-relative), label, score."""

    start: int
    end: int
    label: str
    score: float


@dataclass
class GlinerModel:
    """A loaded GLiNER model: the package's runtime object plus what windowing needs to know about it."""

    card: ModelCard
    runtime: Any  # a gliner BaseEncoderGLiNER (an nn.Module)
    device: str
    precision: DeviceProfile
    max_tokens: int  # longest input (prompt + words, in tokens, with special tokens) the encoder reads
    window_words: int  # most words in one window (the model's max_len unless the card says fewer)
    overlap_words: int
    max_width: int  # longest entity, in words
    _collator: Any = field(default=None, repr=False)
    _word_tokens: dict[str, int] = field(default_factory=dict, repr=False)
    _prompts: dict[tuple[str, ...], int] = field(default_factory=dict, repr=False)

    # -- the LoadedModel protocol ------------------------------------------------------------------

    @property
    def max_len(self) -> int:
        return self.max_tokens

    def tensor_bytes(self) -> int:
        return memory.tensor_bytes([self.runtime])

    def move_to(self, device: str) -> None:
        if device != self.device:
            memory.move_modules([self.runtime], device)
            self.device = device

    def variant(self, precision: str) -> GlinerModel:
        """A copy of this (float32) model in another precision of its device, sharing the tokenizers: what the
        quality gate compares and auto-tune measures. int8 quantises every Linear layer (the LSTM and
        embeddings stay float32)."""
        profile = device_profile(self.card, self.device, precision)
        if profile.name != precision:
            raise InvalidInput(f"{self.device} cannot run precision {precision!r}; it runs {supported(self.device)}")
        processor = self.runtime.data_processor
        runtime = copy.deepcopy(self.runtime, {id(processor): processor}).to(dtype=profile.dtype)
        if profile.quantized:
            quantize_linears(runtime)
        return dataclasses.replace(self, runtime=runtime, precision=profile, _collator=None)

    # -- words and tokens --------------------------------------------------------------------------

    @property
    def bi_encoder(self) -> bool:
        return getattr(self.runtime.data_processor, "labels_tokenizer", None) is not None

    def words(self, text: str) -> list[Word]:
        """GLiNER's own word split (so spans map back exactly), with character offsets."""
        return [(w, s, e) for w, s, e in self.runtime.data_processor.words_splitter(text)]

    def token_counts(self, words: Sequence[str]) -> list[int]:
        """Tokens each word takes inside a sequence (no special tokens), as the encoder's tokenizer splits it.
        Counts are remembered per word (most words recur), so the tokenizer sees only new ones."""
        known = self._word_tokens
        new = list(dict.fromkeys(w for w in words if w not in known))
        if not new:
            return [known[w] for w in words]
        fresh = dict(zip(new, self._count_tokens(new), strict=True))
        counts = [known[w] if w in known else fresh[w] for w in words]
        if len(known) + len(fresh) > WORD_CACHE:
            known.clear()
        if len(fresh) <= WORD_CACHE:
            known.update((w, n) for w, n in fresh.items() if len(w) <= CACHED_WORD_CHARS)
        return counts

    def _count_tokens(self, words: list[str]) -> list[int]:
        tok = self.runtime.data_processor.transformer_tokenizer
        backend = getattr(tok, "backend_tokenizer", None)  # the fast tokenizer itself: no per-word Python objects
        if backend is not None:
            return [len(e.ids) for e in backend.encode_batch(words, add_special_tokens=False)]
        return [len(ids) for ids in tok(words, add_special_tokens=False)["input_ids"]]

    def prompt_tokens(self, labels: Sequence[str]) -> int:
        """Tokens a sequence spends before its text: special tokens, and (uni-encoders) the label prompt."""
        key = tuple(labels)
        if key in self._prompts:
            return self._prompts[key]
        count = self._count_prompt(key)
        if sum(map(len, key)) <= CACHED_PROMPT_CHARS:  # a huge label list is counted afresh, never kept
            if len(self._prompts) >= PROMPT_CACHE:
                del self._prompts[next(iter(self._prompts))]
            self._prompts[key] = count
        return count

    def _count_prompt(self, labels: tuple[str, ...]) -> int:
        processor = self.runtime.data_processor
        prompt: list[str] = []
        if not self.bi_encoder:
            texts, _ = processor.prepare_inputs([[]], [list(labels)])
            prompt = list(texts[0])
        ids = processor.transformer_tokenizer(prompt or [""], is_split_into_words=True)["input_ids"]
        return len(ids)

    # -- one batched call ---------------------------------------------------------------------------

    @torch.inference_mode()
    def predict(self, windows: Sequence[Window]) -> list[list[Span]]:
        """Entities of every window, from one forward pass over all of them (each with its own labels)."""
        if not windows:
            return []
        rt = self.runtime
        if self._collator is None:
            self._collator = rt.create_collator()
        types = [list(w.labels) for w in windows]
        inputs = [{"tokenized_text": list(w.words), "ner": None} for w in windows]
        batch = rt.collate_batch(inputs, types, self._collator, types)
        output = rt.run_batch(batch, threshold=min(w.threshold for w in windows))
        decoded = rt.decode_batch(
            output,
            batch,
            threshold=[w.threshold for w in windows],
            flat_ner=[w.flat_ner for w in windows],
            multi_label=[w.multi_label for w in windows],
        )
        return [[Span(s.start, s.end, s.entity_type, float(s.score)) for s in row] for row in decoded]


# -- loading ---------------------------------------------------------------------------------------


def read_state(folder: Path) -> dict[str, Tensor]:
    """The checkpoint's tensors: model.safetensors, else pytorch_model.bin read with weights_only (plain tensors
    only; any other pickled object is refused, never built)."""
    safe = folder / "model.safetensors"
    if safe.is_file():
        return load_file(str(safe))
    pickled = folder / "pytorch_model.bin"
    if not pickled.is_file():
        raise ModelLoadFailed(f"{folder} holds neither model.safetensors nor pytorch_model.bin")
    try:
        state = torch.load(pickled, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - UnpicklingError and friends: the file is not plain tensors
        raise ModelLoadFailed(f"{pickled} is not a plain tensor checkpoint; refused to unpickle it: {e}") from e
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, Tensor) for k, v in state.items()):
        raise ModelLoadFailed(f"{pickled} does not hold a flat map of names to tensors")
    return state


def _refuse_remote_code(config: dict[str, Any], folder: Path) -> None:
    for key in ("encoder_config", "labels_encoder_config"):
        sub = config.get(key)
        if isinstance(sub, dict) and "auto_map" in sub:
            raise ModelLoadFailed(f"{folder}: {key} names remote code (auto_map); shoal runs no remote code")


def _tokenizer(source: str | Path, local_only: bool) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(source), local_files_only=local_only)


def _max_tokens(encoder: PretrainedConfig, tokenizer: PreTrainedTokenizerBase) -> int:
    limits = [int(getattr(encoder, "max_position_embeddings", 0) or 0), int(tokenizer.model_max_length or 0)]
    usable = [n for n in limits if 0 < n < 1_000_000]
    return min(usable) if usable else MAX_TOKENS


def build_runtime(folder: Path, config: dict[str, Any], device: str, dtype: torch.dtype) -> Any:
    """The gliner runtime object for a checkpoint folder, weights loaded strictly (every tensor named and shaped)."""
    try:
        import gliner  # lazily: only a GLiNER load pays for it
    except ImportError as e:
        raise ModelLoadFailed(f"GLiNER models need the gliner package: pip install 'shoal[gliner]' ({e})") from None
    _refuse_remote_code(config, folder)
    state = read_state(folder)
    has_tokenizer = (folder / "tokenizer_config.json").is_file()
    local_only = has_tokenizer and isinstance(config.get("encoder_config"), dict)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cls = gliner.GLiNER._get_gliner_class(gliner.GLiNER._config_from_dict(copy.deepcopy(config)))
        if cls.__name__ not in SERVED:
            raise ModelLoadFailed(f"{folder}: GLiNER variant {cls.__name__} is not served; shoal runs {SERVED}")
        fields = {k: v for k, v in copy.deepcopy(config).items() if k != "model_type"}
        gconfig = cls.config_class(**fields)  # the variant's own config class, as gliner's loader uses
        tokenizer = _tokenizer(folder if has_tokenizer else gconfig.model_name, local_only)
        cls._set_tokenizer_spec_tokens(tokenizer)
        extra: dict[str, PreTrainedTokenizerBase] = {}
        if (folder / "labels_tokenizer" / "tokenizer_config.json").is_file():
            extra["labels_tokenizer"] = _tokenizer(folder / "labels_tokenizer", True)
        runtime = cls(
            gconfig, tokenizer=tokenizer, backbone_from_pretrained=False, local_files_only=local_only, **extra
        )
        cls._resize_token_embeddings(runtime, gconfig, tokenizer, True)
    expected = runtime.model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    wrong = [k for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if missing or unexpected or wrong:
        raise ModelLoadFailed(
            f"weights in {folder} do not match gliner_config.json: missing {missing[:5]}, unexpected "
            f"{unexpected[:5]}, mis-shaped {wrong[:5]}"
        )
    runtime.model.load_state_dict(state, strict=True)
    return runtime.to(device=device, dtype=dtype).eval().requires_grad_(False)


def load_gliner(spec: LoadSpec) -> GlinerModel:
    """Load a GLiNER checkpoint folder (residency's loader for the gliner family)."""
    config = read_object(spec.folder / "gliner_config.json")
    if not config:
        raise ModelLoadFailed(f"{spec.folder} has no gliner_config.json; it is not a GLiNER checkpoint")
    try:
        runtime = build_runtime(spec.folder, config, spec.device, spec.precision.dtype)
        if spec.precision.quantized:
            quantize_linears(runtime)
    except ModelLoadFailed:
        raise
    except (OSError, KeyError, TypeError, ValueError) as e:
        reason = f"{type(e).__name__}: {e}"
        raise ModelLoadFailed(f"{spec.folder}: cannot build the GLiNER model: {reason[:400]}") from e
    gconfig = runtime.config
    encoder = gconfig.encoder_config
    tokens = min(_max_tokens(encoder, runtime.data_processor.transformer_tokenizer), spec.card.max_seq_len)
    extract = spec.card.extract
    words = int(gconfig.max_len)
    if extract is not None and extract.window_words:
        words = min(words, extract.window_words)
    overlap = extract.overlap_words if extract is not None else 48
    return GlinerModel(
        card=spec.card,
        runtime=runtime,
        device=spec.device,
        precision=spec.precision,
        max_tokens=tokens,
        window_words=words,
        overlap_words=min(overlap, words // 2),
        max_width=int(gconfig.max_width),
    )
