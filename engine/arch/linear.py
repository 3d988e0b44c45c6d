"""Linear layers on oneDNN's CPU kernel: the bias, and a GELU or ReLU, applied inside the matmul.

PyTorch's CPU `F.linear` is an addmm: it first copies the bias into every row of the output, then runs the
matmul over it, and an activation is one more pass over the [T, out] result. oneDNN's linear (the op
torch.compile's CPU backend emits, `torch.ops.mkldnn._linear_pointwise`) adds the bias, and optionally the
activation, in the matmul's own epilogue. It is a private op, so it is used only after a probe at import
shows it exists and agrees with `F.linear`, and only where it applies: CPU, float32 or bfloat16 (bfloat16
only where the CPU's oneDNN runs it), no autograd. Anything else (CUDA, int8's own layers, training, bfloat16
on an AVX2-only CPU) takes nn.Linear's path. `FusedLinear` is an nn.Linear, so checkpoints, the int8
replacement and LoRA's forward hooks see the same module.

Given a plain [out, in] weight, oneDNN reorders it into its blocked layout on every call. `lay_out_weights`
does that once per layer, when a model is built (oneDNN's own `_reorder_linear_weight`, the layout
torch.compile's freezing pass uses), and keeps the result beside the plain weight, which checkpoints, LoRA,
int8 and device moves still use. Measured on an AMX Xeon with MiniLM's shapes: bf16 linear +12-25% at
800 rows, +40-70% at 16 rows, 1-3% at 4,096; float32 +5-10%, +40-60% at 16 rows (bench/roofline.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FUSED_ACTIVATIONS: dict[str, tuple[str, str]] = {  # our activation name -> oneDNN (attr, algorithm)
    "gelu": ("gelu", "none"),
    "gelu_new": ("gelu", "tanh"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "relu": ("relu", ""),
}


def _bfloat16_runs() -> bool:
    """Whether this CPU's oneDNN runs bfloat16 (it needs AVX512-BF16 or AMX, or AVX512 core; an AVX2-only CPU
    refuses it). A query of the CPU's features, not a bfloat16 op: an op run at import would start oneDNN's
    thread pool before the engine sets its thread count."""
    query = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(query is not None and query())


_DTYPES = (torch.float32, *((torch.bfloat16,) if _bfloat16_runs() else ()))  # the dtypes oneDNN's path takes


def _probe() -> bool:
    """True when oneDNN's linear exists here and matches F.linear on a small input, plain and with GELU."""
    op = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    if op is None or not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]  # unannotated in torch
        return False
    try:
        g = torch.Generator().manual_seed(0)
        x, w, b = (torch.randn(*shape, generator=g) for shape in ((8, 16), (12, 16), (12,)))
        with torch.inference_mode():
            plain = torch.allclose(op(x, w, b, "none", [], ""), F.linear(x, w, b), atol=1e-4)
            gelu = torch.allclose(op(x, w, b, "gelu", [], "none"), F.gelu(F.linear(x, w, b)), atol=1e-4)
        return bool(plain and gelu)
    except RuntimeError:
        return False


ENABLED = _probe()  # tests may turn it off to compare the two paths


def _reorder_probe() -> Callable[[Tensor, int | None], Tensor] | None:
    """oneDNN's weight reorder, when it exists here and its layout gives F.linear's result."""
    reorder = getattr(torch.ops.mkldnn, "_reorder_linear_weight", None)
    if not ENABLED or reorder is None:
        return None
    try:
        g = torch.Generator().manual_seed(1)
        x, w, b = (torch.randn(*shape, generator=g) for shape in ((8, 16), (12, 16), (12,)))
        with torch.no_grad():
            laid = torch.ops.mkldnn._linear_pointwise(x, reorder(w, None), b, "none", [], "")
        return reorder if torch.allclose(laid, F.linear(x, w, b), atol=1e-4) else None
    except RuntimeError:
        return None


_REORDER = _reorder_probe()


@dataclass(frozen=True)
class LaidOut:
    """A weight in oneDNN's blocked layout, with the plain weight it was made from (storage, dtype, version)."""

    source: tuple[int, torch.dtype, int]
    weight: Tensor  # an opaque oneDNN tensor: only oneDNN's ops read it

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()


def _source(weight: Tensor) -> tuple[int, torch.dtype, int]:
    return (weight.data_ptr(), weight.dtype, weight._version)


# Kept outside the modules, so that copying a module (a precision variant) never copies an opaque tensor and a
# collected module takes its laid-out weight with it.
_LAID_OUT: WeakKeyDictionary[FusedLinear, LaidOut] = WeakKeyDictionary()


class FusedLinear(nn.Linear):
    """nn.Linear whose CPU inference forward runs on oneDNN's linear (bias in the epilogue), on the weight laid
    out once for it where `lay_out_weights` has done so."""

    def fusable(self, x: Tensor) -> bool:
        """Whether this call can take oneDNN's path."""
        return (
            ENABLED
            and x.device.type == "cpu"
            and x.dtype in _DTYPES
            and self.weight.dtype == x.dtype
            and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
        )

    def onednn_weight(self) -> Tensor:
        """The laid-out weight while it still matches the plain one, else the plain weight (a stale layout,
        left by a device move or a cast, is dropped here rather than used)."""
        laid = _LAID_OUT.get(self)
        if laid is None:
            return self.weight
        if laid.source != _source(self.weight):
            del _LAID_OUT[self]
            return self.weight
        return laid.weight

    def lay_out(self) -> int:
        """Lay the weight out for oneDNN once (where the fused path takes it); bytes the layout takes."""
        w = self.weight
        if not (ENABLED and w.device.type == "cpu" and w.dtype in _DTYPES and _REORDER is not None):
            _LAID_OUT.pop(self, None)
            return 0
        laid = _LAID_OUT.get(self)
        if laid is None or laid.source != _source(w):
            with torch.no_grad():  # not inference_mode: the layout may serve calls made outside it
                laid = LaidOut(_source(w), _REORDER(w.detach(), None))
            _LAID_OUT[self] = laid
        return laid.nbytes

    def forward(self, x: Tensor) -> Tensor:
        if self.fusable(x):
            return torch.ops.mkldnn._linear_pointwise(x, self.onednn_weight(), self.bias, "none", [], "")
        return super().forward(x)

    def with_activation(self, x: Tensor, activation: str) -> Tensor | None:
        """act(linear(x)) in one oneDNN call, or None when it cannot be fused here: another device or dtype,
        an activation oneDNN does not fuse, or hooks on this module (a LoRA delta must be added before the
        activation, which the hooked module call does)."""
        fused = FUSED_ACTIVATIONS.get(activation)
        if fused is None or self._forward_hooks or self._forward_pre_hooks or not self.fusable(x):
            return None
        attr, algorithm = fused
        return torch.ops.mkldnn._linear_pointwise(x, self.onednn_weight(), self.bias, attr, [], algorithm)


def lay_out_weights(modules: Iterable[nn.Module]) -> int:
    """Lay out every FusedLinear's weight under `modules` for oneDNN (dropping layouts that no longer apply,
    after a move to another device); bytes the layouts take."""
    return sum(m.lay_out() for root in modules for m in root.modules() if isinstance(m, FusedLinear))


def laid_out_bytes(modules: Iterable[nn.Module]) -> int:
    """Bytes of the current laid-out weights under `modules` (counted with the model's tensors)."""
    return sum(
        laid.nbytes
        for root in modules
        for m in root.modules()
        if isinstance(m, FusedLinear) and (laid := _LAID_OUT.get(m)) is not None and laid.source == _source(m.weight)
    )
