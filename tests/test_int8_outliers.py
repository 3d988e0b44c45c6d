"""int8 linear layers quantise rows of outlying magnitude with a scale of their own, so the other rows keep
their resolution; batches without such rows take fbgemm's single call unchanged."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import engine.model.quantize as quantize
from engine.model.precision import available
from engine.model.quantize import Int8Linear

pytestmark = pytest.mark.skipif("int8" not in available("cpu"), reason="fbgemm int8 kernels need x86 with AVX2")


def layer_and_rows(outlier_scale: float) -> tuple[nn.Linear, Int8Linear, torch.Tensor]:
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    x = torch.randn(256, 64)  # [T, in]
    x[0] *= outlier_scale  # one row like BERT's first token
    return linear, Int8Linear(linear), x


def test_an_outlying_row_no_longer_costs_the_other_rows_their_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    linear, int8, x = layer_and_rows(30.0)
    with torch.inference_mode():
        want = linear(x)
        apart = int8(x)
        monkeypatch.setattr(quantize, "OUTLIER_RATIO", float("inf"))  # one scale for every row
        shared = int8(x)
    error_apart = (apart[1:] - want[1:]).abs().max().item()
    error_shared = (shared[1:] - want[1:]).abs().max().item()
    assert error_apart * 5 < error_shared, (error_apart, error_shared)
    relative_outlier = ((apart[0] - want[0]).norm() / want[0].norm()).item()
    assert relative_outlier < 0.05  # the outlying row itself keeps int8 precision


def test_a_batch_without_outliers_is_one_fbgemm_call() -> None:
    _, int8, x = layer_and_rows(1.0)
    with torch.inference_mode():
        assert torch.equal(int8(x), int8._linear(x))


def test_inputs_with_leading_dimensions_keep_their_shape() -> None:
    """GLiNER's layers see [batch, length, in]: the same rows, the same answer."""
    _, int8, x = layer_and_rows(30.0)
    with torch.inference_mode():
        flat = int8(x)  # [256, 32]
        batched = int8(x.reshape(4, 64, 64))  # [4, 64, 32]
    assert batched.shape == (4, 64, 32) and torch.equal(batched.reshape(256, 32), flat)


def test_an_empty_batch_gives_an_empty_answer() -> None:
    _, int8, x = layer_and_rows(1.0)
    with torch.inference_mode():
        assert int8(x[:0]).shape == (0, 32)
