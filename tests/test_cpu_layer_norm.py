"""shoal's bfloat16 LayerNorm kernel (engine/arch/csrc/layer_norm.cpp through engine/arch/layers.py's
LayerNorm): torch's bf16 result within torch's own error, any row width, with and without bias, used only for
bfloat16 on the CPU, off when configured so, and the same checkpoints as nn.LayerNorm."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from engine.arch import cpu_kernels
from engine.arch.layers import LayerNorm

needs_kernel = pytest.mark.skipif(
    not cpu_kernels.cpu_supported(), reason="the kernels need AVX512-BF16, which this CPU lacks"
)


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    yield
    cpu_kernels.configure(True, tiles=True)


def norm(width: int, bias: bool, seed: int = 0) -> LayerNorm:
    torch.manual_seed(seed)
    ln = LayerNorm(width, eps=1e-12, bias=bias)
    with torch.no_grad():
        ln.weight.normal_()
        if ln.bias is not None:
            ln.bias.normal_()
    return ln


@needs_kernel
@pytest.mark.parametrize(("width", "bias"), [(384, True), (100, True), (768, False), (48, True), (16, True)])
def test_the_kernel_matches_torch_within_its_own_bf16_error(width: int, bias: bool) -> None:
    ln = norm(width, bias)
    x = torch.randn(3, 67, width) * 3 + 1  # [B, T, H]: any leading shape
    reference = nn.functional.layer_norm(x, (width,), ln.weight, ln.bias, ln.eps)
    ln16, x16 = ln.bfloat16(), x.bfloat16()
    with torch.inference_mode():
        assert cpu_kernels.norm_usable(x16)
        ours = ln16(x16)
        theirs = nn.LayerNorm.forward(ln16, x16)
    assert ours.shape == x.shape and ours.dtype == torch.bfloat16
    torch_error = (theirs.float() - reference).abs().max().item()
    assert (ours.float() - reference).abs().max().item() <= 1.5 * torch_error + 1e-3
    assert (ours.float() - theirs.float()).abs().max().item() <= 2 * torch_error + 1e-3


@needs_kernel
def test_a_constant_row_gives_the_bias_not_a_nan() -> None:
    ln = norm(64, True).bfloat16()
    with torch.inference_mode():
        out = ln(torch.full((5, 64), 2.5).bfloat16())
    assert torch.isfinite(out.float()).all()
    assert torch.allclose(out.float(), ln.bias.float().expand(5, 64), atol=1e-2)


def test_float32_and_a_disabled_kernel_take_torchs_path() -> None:
    ln = norm(32, True)
    x = torch.randn(7, 32)
    assert not cpu_kernels.norm_usable(x)
    cpu_kernels.configure(False)
    x16 = x.bfloat16()
    assert not cpu_kernels.norm_usable(x16)
    ln16 = ln.bfloat16()
    with torch.inference_mode():
        assert torch.equal(ln16(x16), nn.LayerNorm.forward(ln16, x16))


def test_checkpoints_of_nn_layernorm_load_unchanged() -> None:
    plain = nn.LayerNorm(24)
    with torch.no_grad():
        plain.weight.normal_()
    ours = LayerNorm(24)
    ours.load_state_dict(plain.state_dict())
    x = torch.randn(4, 24)
    assert torch.equal(ours(x), plain(x))
