"""Weights laid out once for oneDNN (engine/arch/linear.py: lay_out_weights): the same outputs as the plain
weight, a stale layout never used after the weight changes, and the layouts counted in a model's bytes."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from engine.arch import linear
from engine.arch.layers import MLP
from engine.arch.linear import FusedLinear, laid_out_bytes, lay_out_weights
from engine.catalogue.catalogue import Catalogue
from engine.model import memory
from engine.model.loader import load_model
from tests.helpers import make_tiny_bert

needs_layout = pytest.mark.skipif(linear._REORDER is None, reason="oneDNN's weight reorder is not available here")


def dtypes() -> list[torch.dtype]:
    return list(linear._DTYPES)


@needs_layout
@pytest.mark.parametrize("dtype", dtypes())
def test_a_laid_out_weight_gives_the_plain_weights_output(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    mlp = MLP(64, 256, "gelu").to(dtype).eval()
    x = torch.randn(37, 64).to(dtype)
    with torch.inference_mode():
        plain = mlp(x).float()
        assert lay_out_weights([mlp]) > 0
        assert mlp.up.onednn_weight().layout == torch._mkldnn  # type: ignore[attr-defined]  # private in torch
        laid = mlp(x).float()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(laid, plain, atol=tol, rtol=tol)


@needs_layout
def test_a_changed_weight_is_used_and_its_stale_layout_dropped() -> None:
    torch.manual_seed(0)
    layer = FusedLinear(32, 48).eval()
    x = torch.randn(9, 32)
    lay_out_weights([layer])
    with torch.no_grad():
        layer.weight.mul_(2.0)  # in place: the same storage, a new version
    with torch.inference_mode():
        got = layer(x)
    assert torch.allclose(got, torch.nn.functional.linear(x, layer.weight, layer.bias), atol=1e-5)
    assert laid_out_bytes([layer]) == 0  # dropped at the call, not kept beside the new weight


@needs_layout
def test_a_cast_layer_runs_its_new_dtype_until_laid_out_again() -> None:
    if torch.bfloat16 not in linear._DTYPES:
        pytest.skip("oneDNN does not run bfloat16 on this CPU")
    torch.manual_seed(0)
    layer = FusedLinear(32, 48).eval()
    lay_out_weights([layer])
    layer.to(torch.bfloat16)
    x = torch.randn(9, 32).bfloat16()
    with torch.inference_mode():
        assert layer(x).dtype == torch.bfloat16
        assert lay_out_weights([layer]) > 0
        assert layer.onednn_weight().dtype == torch.bfloat16


@needs_layout
def test_a_copied_module_carries_no_layout_of_the_original() -> None:
    layer = FusedLinear(16, 16)
    lay_out_weights([layer])
    twin = copy.deepcopy(layer)
    assert laid_out_bytes([twin]) == 0 and laid_out_bytes([layer]) > 0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("laid-out") / "m", seed=3)


@needs_layout
def test_a_loaded_model_is_laid_out_counted_and_its_variants_too(tiny: Path) -> None:
    model = load_model(Catalogue().get(str(tiny)), offline=True, precision="float32")
    laid = laid_out_bytes(model.modules())
    assert laid > 0
    assert model.tensor_bytes() == memory.tensor_bytes(model.modules()) + laid
    seqs = model.encode_texts(["a laid out weight", "and another sentence"], truncate=True)
    before = model.embed(seqs)
    int8 = model.variant("int8")  # Int8Linear layers: nothing for oneDNN's float path
    assert laid_out_bytes(int8.modules()) == 0
    again = model.variant("float32")
    assert laid_out_bytes(again.modules()) == laid
    assert torch.allclose(again.embed(seqs), before, atol=1e-5)
