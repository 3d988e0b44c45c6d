"""int8 dynamic quantisation of a backbone's linear layers (CPU, fbgemm).

Each weight matrix is stored as int8 with one scale per output channel; each call quantises its input to 8
bits with one scale for the whole batch (7 bits: fbgemm's AVX2 kernels would overflow their 16-bit partial
sums with 8), multiplies in integers and returns float32 with the bias added. Attention scores, norms,
activations and the heads stay float32.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn


class Int8Linear(nn.Module):
    """A Linear layer with an int8 weight (per output channel) and input quantised per call."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach().float().cpu()
        scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12)
        bias = linear.bias.detach().float().cpu() if linear.bias is not None else None
        with warnings.catch_warnings():  # quantised tensors are deprecated in torch; fbgemm's packing still takes them
            warnings.simplefilter("ignore", UserWarning)
            zeros = torch.zeros(w.shape[0], dtype=torch.long)
            qweight = torch.quantize_per_channel(w, scale.double(), zeros, 0, torch.qint8)
            self._packed: torch.ScriptObject = torch.ops.quantized.linear_prepack(qweight, bias)
        # the int8 weight and scales as plain buffers: what the module weighs, and what state_dict shows
        self.register_buffer("weight_int8", qweight.int_repr(), persistent=False)
        self.register_buffer("weight_scale", scale, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.quantized.linear_dynamic(x, self._packed, False)  # [T, in] -> [T, out] float32

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_linears(module: nn.Module) -> int:
    """Replace every nn.Linear inside `module` by an Int8Linear, in place. -> how many were replaced."""
    targets = [(name, child) for name, child in module.named_modules() if isinstance(child, nn.Linear)]
    for name, linear in targets:
        owner, _, attr = name.rpartition(".")
        parent = module.get_submodule(owner) if owner else module
        setattr(parent, attr, Int8Linear(linear))
    return len(targets)
