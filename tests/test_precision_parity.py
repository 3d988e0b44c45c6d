"""Every precision profile through the parity harness: each family's packed forward in that precision against
the transformers reference in float32, with a tolerance that fits the precision.

float32 must match to 1e-4 (tests/test_arch_parity.py); half precisions keep 8 (bfloat16) or 11 (float16)
mantissa bits, and int8 quantises weights and activations to 8 bits, so those are held to the direction of
each token's hidden state (cosine) rather than to its digits. On a CPU without fast bfloat16 or float16
the same code runs emulated (slowly); CUDA's half precisions are checked by tests/test_arch_gpu.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine.catalogue.catalogue import Catalogue
from engine.model.loader import load_model
from engine.model.precision import supported
from engine.model.quantize import Int8Linear
from tests.test_arch_parity import reference_hidden
from tests.tiny_models import make, random_ids

# precision -> (largest absolute error of any hidden value, smallest cosine of any token's hidden state, smallest
# mean cosine over all tokens). Tiny random decoders are the hardest case for int8 (their lowest token: 0.97).
TOLERANCE = {
    "float32": (1e-4, 0.99999, 0.99999),
    "float16": (None, 0.99995, 0.99999),
    "bfloat16": (None, 0.9995, 0.9999),
    "int8": (None, 0.95, 0.99),
}
FAMILIES = ["bert", "xlm_roberta", "modernbert", "qwen3", "llama"]


@pytest.mark.parametrize("precision", list(TOLERANCE))
@pytest.mark.parametrize("family", FAMILIES)
def test_family_in_precision_matches_float32_reference(family: str, precision: str, tmp_path: Path) -> None:
    if precision not in supported("cpu"):
        pytest.skip(f"this CPU cannot run {precision}")
    ref = make(family, "Model", tmp_path)
    model = load_model(Catalogue().get(str(tmp_path)), offline=True, precision=precision)
    assert model.precision.name == precision
    if precision == "int8":  # every linear layer of the backbone is quantised, nothing else
        assert not any(isinstance(m, torch.nn.Linear) for m in model.backbone.modules())
        assert any(isinstance(m, Int8Linear) for m in model.backbone.modules())
    seqs = random_ids(seed=1)
    hidden, batch = model.forward(seqs)
    assert hidden.shape[0] == sum(len(s) for s in seqs)
    max_abs, min_cos, min_mean = TOLERANCE[precision]
    bounds = batch.cu_seqlens.tolist()
    cosines = []
    for ids, start, end in zip(seqs, bounds[:-1], bounds[1:], strict=True):
        want = reference_hidden(ref, ids)
        got = hidden[start:end].float()
        cosines.append(F.cosine_similarity(got, want, dim=-1))
        if max_abs is not None:
            assert (got - want).abs().max().item() <= max_abs, (family, precision, len(ids))
    every = torch.cat(cosines)
    assert every.min().item() >= min_cos, (family, precision, every.min().item())
    assert every.mean().item() >= min_mean, (family, precision, every.mean().item())


def test_a_precision_the_device_cannot_run_falls_back_to_float32(tmp_path: Path) -> None:
    make("bert", "Model", tmp_path)
    card = Catalogue().get(str(tmp_path))
    model = load_model(card, offline=True, precision="int4")
    assert model.precision.name == "float32" and model.dtype == torch.float32
