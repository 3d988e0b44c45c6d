"""Linear layers on oneDNN's CPU kernel: the bias, and a GELU or ReLU, applied inside the matmul.

PyTorch's CPU `F.linear` is an addmm: it first copies the bias into every row of the output, then runs the
matmul over it, and an activation is one more pass over the [T, out] result. oneDNN's linear (the op
torch.compile's CPU backend emits, `torch.ops.mkldnn._linear_pointwise`) adds the bias, and optionally the
activation, in the matmul's own epilogue. It is a private op, so it is used only after a probe at import
shows it exists and agrees with `F.linear`, and only where it applies: CPU, float32 or bfloat16 (bfloat16
only where the CPU's oneDNN runs it), no autograd. Anything else (CUDA, int8's own layers, training, bfloat16
on an AVX2-only CPU) takes nn.Linear's path. `FusedLinear` is an nn.Linear, so checkpoints, the int8
replacement and LoRA's forward hooks see the same module.
"""

from __future__ import annotations

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


def _probe_residual() -> bool:
    """True when oneDNN's linear with a residual added in its epilogue exists here and matches F.linear + r."""
    op = getattr(getattr(torch.ops.mkldnn, "_linear_pointwise", None), "binary", None)
    if not ENABLED or op is None:
        return False
    try:
        g = torch.Generator().manual_seed(1)
        x, w, b, r = (torch.randn(*shape, generator=g) for shape in ((8, 16), (12, 16), (12,), (8, 12)))
        with torch.inference_mode():
            return bool(torch.allclose(op(x, r, w, b, "add"), F.linear(x, w, b) + r, atol=1e-4))
    except RuntimeError:
        return False


RESIDUAL = _probe_residual()  # the residual add inside the matmul


class FusedLinear(nn.Linear):
    """nn.Linear whose CPU inference forward runs on oneDNN's linear (bias in the epilogue)."""

    def fusable(self, x: Tensor) -> bool:
        """Whether this call can take oneDNN's path."""
        return (
            ENABLED
            and x.device.type == "cpu"
            and x.dtype in _DTYPES
            and self.weight.dtype == x.dtype
            and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
        )

    def forward(self, x: Tensor) -> Tensor:
        if self.fusable(x):
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return super().forward(x)

    def plus(self, x: Tensor, residual: Tensor) -> Tensor:
        """linear(x) + residual: the residual added in oneDNN's epilogue where the fused path takes this call
        and no hook watches the module (a LoRA delta belongs to the linear's own output), else after it."""
        hooked = bool(self._forward_hooks or self._forward_pre_hooks)
        if hooked or not (RESIDUAL and self.fusable(x)) or residual.dtype != x.dtype or residual.shape[0] != x.shape[0]:
            return self(x) + residual
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, self.weight, self.bias, "add")

    def with_activation(self, x: Tensor, activation: str) -> Tensor | None:
        """act(linear(x)) in one oneDNN call, or None when it cannot be fused here: another device or dtype,
        an activation oneDNN does not fuse, or hooks on this module (a LoRA delta must be added before the
        activation, which the hooked module call does)."""
        fused = FUSED_ACTIVATIONS.get(activation)
        if fused is None or self._forward_hooks or self._forward_pre_hooks or not self.fusable(x):
            return None
        attr, algorithm = fused
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, attr, [], algorithm)


def linear_plus(layer: nn.Module, x: Tensor, residual: Tensor) -> Tensor:
    """layer(x) + residual, in one oneDNN call where `layer` is a FusedLinear that can take it (an int8
    profile's layers are not)."""
    return layer.plus(x, residual) if isinstance(layer, FusedLinear) else layer(x) + residual
