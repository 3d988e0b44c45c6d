"""oneDNN's fused linear (engine/arch/linear.py): the same outputs as nn.Linear's path, plain and with the
activation fused, in float32 and bfloat16; hooks (LoRA's deltas), autograd and int8 layers keep the module
path."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engine.arch import linear
from engine.arch.layers import MLP
from engine.arch.linear import FusedLinear, linear_plus
from engine.model.quantize import Int8Linear, quantize_linears

needs_onednn = pytest.mark.skipif(not linear.ENABLED, reason="oneDNN's linear is not available on this machine")


def reference(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x, layer.weight, layer.bias)


@needs_onednn
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_linear_matches_the_plain_one(dtype: torch.dtype) -> None:
    if dtype not in linear._DTYPES:
        pytest.skip(f"oneDNN's linear does not run {dtype} on this CPU: nn.Linear's path serves it")
    torch.manual_seed(0)
    layer = FusedLinear(64, 96).to(dtype)
    x = torch.randn(37, 64).to(dtype)
    with torch.inference_mode():
        assert layer.fusable(x)
        fused, plain = layer(x).float(), reference(layer, x).float()
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert torch.allclose(fused, plain, atol=tol, rtol=tol)


@needs_onednn
@pytest.mark.parametrize("activation", ["gelu", "gelu_pytorch_tanh", "relu"])
def test_the_mlp_activation_is_fused_and_gives_the_same_output(
    activation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    mlp = MLP(32, 128, activation).eval()
    x = torch.randn(20, 32)
    with torch.inference_mode():
        assert mlp.up.with_activation(x, activation) is not None
        fused = mlp(x)
        monkeypatch.setattr(linear, "ENABLED", False)
        assert mlp.up.with_activation(x, activation) is None
        plain = mlp(x)
    assert torch.allclose(fused, plain, atol=1e-5)


def test_a_hooked_layer_is_not_fused_so_its_delta_comes_before_the_activation() -> None:
    torch.manual_seed(0)
    mlp = MLP(16, 32, "gelu").eval()
    mlp.up.register_forward_hook(lambda _m, _i, out: out + 1.0)  # what a LoRA delta does
    x = torch.randn(5, 16)
    with torch.inference_mode():
        assert mlp.up.with_activation(x, "gelu") is None
        expected = reference(mlp.down, torch.nn.functional.gelu(reference(mlp.up, x) + 1.0))
        assert torch.allclose(mlp(x), expected, atol=1e-5)


def test_training_takes_the_autograd_path() -> None:
    layer = FusedLinear(8, 4)
    x = torch.randn(3, 8, requires_grad=True)
    assert not layer.fusable(x)
    layer(x).sum().backward()
    assert x.grad is not None and layer.weight.grad is not None


def test_int8_replaces_fused_linears_and_the_mlp_still_runs() -> None:
    torch.manual_seed(0)
    mlp = MLP(16, 32, "gelu").eval()
    x = torch.randn(6, 16)
    with torch.inference_mode():
        before = mlp(x)
        assert quantize_linears(mlp) == 2 and isinstance(mlp.up, Int8Linear)
        after = mlp(x)
    assert torch.nn.functional.cosine_similarity(before, after).min() > 0.99


def test_a_dtype_this_cpus_onednn_refuses_takes_the_plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU whose oneDNN has no bfloat16 (AVX2 only), a bfloat16 layer still answers, through addmm."""
    monkeypatch.setattr(linear, "_DTYPES", (torch.float32,))
    torch.manual_seed(0)
    layer = FusedLinear(16, 8).to(torch.bfloat16)
    x = torch.randn(4, 16).to(torch.bfloat16)
    with torch.inference_mode():
        assert not layer.fusable(x) and layer.with_activation(x, "gelu") is None
        assert torch.equal(layer(x), reference(layer, x))


@pytest.mark.skipif(not linear.RESIDUAL, reason="oneDNN's linear with a residual epilogue is not available here")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_residual_added_inside_the_matmul_gives_the_plain_sum(dtype: torch.dtype) -> None:
    if dtype not in linear._DTYPES:
        pytest.skip(f"oneDNN's linear does not run {dtype} on this CPU")
    torch.manual_seed(0)
    layer = FusedLinear(64, 48).to(dtype).eval()
    x, residual = torch.randn(29, 64).to(dtype), torch.randn(29, 48).to(dtype)
    with torch.inference_mode():
        fused = linear_plus(layer, x, residual).float()
    plain = (reference(layer, x).float() + residual.float()).to(dtype).float()
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert torch.allclose(fused, plain, atol=tol, rtol=tol)


def test_a_hooked_or_int8_layer_adds_the_residual_after_its_own_output() -> None:
    torch.manual_seed(0)
    layer = FusedLinear(16, 8).eval()
    layer.register_forward_hook(lambda _m, _i, out: out + 1.0)  # a LoRA delta belongs to the linear's output
    x, residual = torch.randn(5, 16), torch.randn(5, 8)
    with torch.inference_mode():
        got = linear_plus(layer, x, residual)
        q = Int8Linear(FusedLinear(16, 8).eval())
        got_int8 = linear_plus(q, x, residual)
        want_int8 = q(x) + residual
    assert torch.allclose(got, reference(layer, x) + 1.0 + residual, atol=1e-5)
    assert torch.allclose(got_int8, want_int8)
