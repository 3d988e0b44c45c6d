"""shoal's bfloat16 CPU attention kernel: the same attention as torch's, on its AMX and AVX512-BF16 paths,
used only where it applies, off when configured so, and a failed build leaves torch's attention in use.

On a CPU without AVX512-BF16 the kernel cannot run and the tests that run it skip; on one without AMX the
kernel takes its AVX512-BF16 path even when tiles are allowed, so both parametrisations test that path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine.arch import cpu_kernels
from engine.arch.layers import PackedBatch, varlen_attention
from engine.config import EngineSettings
from engine.runtime import AsyncEngine

needs_kernel = pytest.mark.skipif(
    not cpu_kernels.cpu_supported(), reason="this CPU has no AVX512-BF16: the kernel cannot run here"
)
LENGTHS = [1, 2, 15, 16, 17, 31, 32, 33, 64, 65, 130, 300]


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    yield
    cpu_kernels.configure(True, tiles=True)


def packed(lengths: list[int], heads: int, head_dim: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    return tuple(torch.randn(sum(lengths), heads, head_dim).bfloat16() for _ in range(3))


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """torch's attention in float32 on the same bf16 inputs."""
    cpu_kernels.configure(False)
    out = varlen_attention(q.float(), k.float(), v.float(), batch)
    cpu_kernels.configure(True)
    return out


@needs_kernel
@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("head_dim", [32, 64, 96, 128])
def test_kernel_matches_float32_attention(tiles: bool, head_dim: int) -> None:
    batch = PackedBatch.from_token_lists([[1] * n for n in LENGTHS])
    q, k, v = packed(LENGTHS, 3, head_dim)
    want = reference(q, k, v, batch)
    cpu_kernels.configure(False)
    sdpa_err = (varlen_attention(q, k, v, batch).float() - want).abs().max().item()
    cpu_kernels.configure(True, tiles=tiles)
    assert cpu_kernels.usable(q, causal=False, window=None, gqa=False)
    got = varlen_attention(q, k, v, batch)
    assert got.dtype == torch.bfloat16 and got.shape == q.shape
    err = (got.float() - want).abs().max().item()
    # bf16 inputs and outputs: the kernel is as close to float32 as torch's own bf16 attention
    assert err <= max(2 * sdpa_err, 0.01), (err, sdpa_err)
    cos = F.cosine_similarity(got.float().reshape(-1, head_dim), want.reshape(-1, head_dim), dim=-1)
    assert cos.min().item() > 0.999


@needs_kernel
@pytest.mark.parametrize("tiles", [True, False])
def test_kernel_attends_only_to_key_prefix(tiles: bool) -> None:
    lengths = [50, 70, 33]
    batch = PackedBatch.from_token_lists([[1] * n for n in lengths], key_lengths=[10, 70, 1])
    assert batch.key_lengths is not None
    q, k, v = packed(lengths, 2, 32, seed=1)
    want = reference(q, k, v, batch)
    cpu_kernels.configure(True, tiles=tiles)
    got = varlen_attention(q, k, v, batch).float()
    assert (got - want).abs().max().item() < 0.01
    # the last sequence sees one key: every row's output is that key's value
    last = slice(120, 153)
    assert torch.allclose(got[last], v[120].float().expand(33, -1, -1), atol=0.01)


@needs_kernel
def test_torch_amx_attention_still_right_after_the_kernel() -> None:
    """torch's own bf16 attention (AMX brgemm on CPUs with tiles) gives the same result after the kernel ran."""
    torch.manual_seed(2)
    q = torch.randn(2, 12, 200, 64).bfloat16()
    before = F.scaled_dot_product_attention(q, q, q)
    lengths = [100, 200, 37]
    batch = PackedBatch.from_token_lists([[1] * n for n in lengths])
    qs, ks, vs = packed(lengths, 12, 32)
    for _ in range(3):
        varlen_attention(qs, ks, vs, batch)
        assert torch.equal(F.scaled_dot_product_attention(q, q, q), before)


def test_kernel_used_only_where_it_applies() -> None:
    q = torch.zeros(4, 2, 32, dtype=torch.bfloat16)
    cases = [
        (q.float(), False, None, False),  # float32: torch's attention
        (q, True, None, False),  # causal
        (q, False, 8, False),  # a local window
        (q, False, None, True),  # fewer key heads than query heads
        (torch.zeros(4, 2, 48, dtype=torch.bfloat16), False, None, False),  # head size not a multiple of 32
    ]
    for tensor, causal, window, gqa in cases:
        assert not cpu_kernels.usable(tensor, causal, window, gqa)
    cpu_kernels.configure(False)
    assert not cpu_kernels.usable(q, False, None, False)


def test_build_without_compiler_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_kernels, "_cache_dir", tmp_path / "kernels")
    monkeypatch.setenv("CXX", "/bin/false")
    with pytest.raises(RuntimeError, match="failed"):
        cpu_kernels._build()
    assert not list((tmp_path / "kernels").glob("*.so"))  # nothing half-built is left to load


def test_failed_build_falls_back_to_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_kernels, "_cache_dir", tmp_path / "kernels")
    monkeypatch.setattr(cpu_kernels, "_loaded", None)
    monkeypatch.setattr(cpu_kernels, "cpu_supported", lambda: True)
    monkeypatch.setenv("CXX", "/bin/false")
    assert cpu_kernels.ready() is False
    batch = PackedBatch.from_token_lists([[1] * 5, [1] * 3])
    q, k, v = packed([5, 3], 2, 32)
    assert varlen_attention(q, k, v, batch).shape == q.shape  # torch's attention answered


async def test_engine_setting_turns_the_kernel_off(tmp_path: Path) -> None:
    settings = EngineSettings(cpu_kernels=False, kernel_cache=tmp_path, profile_store=tmp_path / "p.json")
    engine = AsyncEngine(settings, worker=False)
    await engine.start()
    try:
        assert not cpu_kernels.usable(torch.zeros(4, 2, 32, dtype=torch.bfloat16), False, None, False)
    finally:
        await engine.close()


@needs_kernel
def test_minilm_bf16_forward_same_with_and_without_the_kernel() -> None:
    from engine.catalogue.catalogue import Catalogue
    from engine.model.loader import load_model

    model = load_model(Catalogue().get("sentence-transformers/all-MiniLM-L6-v2"), "cpu", precision="bfloat16")
    texts = ["a harbour at dawn", "the pump stops with error E-417 when the inlet is blocked " * 6, "x"]
    encoded = model.encode_texts(texts, truncate=True)
    cpu_kernels.configure(False)
    sdpa = model.forward(encoded)[0].float()  # [tokens, hidden]
    cpu_kernels.configure(True)
    kernel = model.forward(encoded)[0].float()
    assert F.cosine_similarity(sdpa, kernel, dim=-1).min().item() > 0.999
