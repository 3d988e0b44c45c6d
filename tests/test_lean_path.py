"""The lean request path: zero-copy msgpack arrays, packing without per-token Python, one thread budget."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch

from engine.arch.layers import PackedBatch
from engine.wire import _encode_numpy, packb, unpackb

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(384, dtype=np.float32),
        np.arange(12, dtype=np.int8).reshape(3, 4),
        np.array([True, False, True]),
        np.zeros((0, 8), dtype=np.float32),
        np.array(2.5, dtype=np.float16),
    ],
)
def test_msgpack_arrays_are_packed_from_their_own_memory(arr: np.ndarray) -> None:
    data = _encode_numpy(arr)[b"data"]
    if arr.size:
        assert isinstance(data, memoryview)
        assert np.shares_memory(np.frombuffer(data, dtype=np.uint8), arr)  # no copy before msgpack's buffer
    # the wire bytes are exactly the msgpack-numpy convention's (bin of the raw bytes)
    reference = msgpack.packb(
        {b"nd": True, b"type": arr.dtype.str, b"kind": b"", b"shape": list(arr.shape), b"data": arr.tobytes()},
        use_bin_type=True,
    )
    assert packb(arr) == reference
    back = unpackb(packb({"v": arr}))["v"]
    assert back.dtype == arr.dtype and back.shape == arr.shape and np.array_equal(back, arr)


def test_rows_of_one_result_are_views_until_packed() -> None:
    """dense() hands out rows of one array; packing a row reads that array's memory."""
    values = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    for row in values:
        assert np.shares_memory(np.frombuffer(_encode_numpy(row)[b"data"], dtype=np.uint8), values)


def test_packed_batch_matches_the_per_token_definition() -> None:
    rng = random.Random(7)
    seqs = [[rng.randrange(30000) for _ in range(rng.randrange(1, 40))] for _ in range(25)]
    types = [[rng.randrange(2) for _ in s] for s in seqs]
    batch = PackedBatch.from_token_lists(seqs, type_ids=types)
    assert batch.input_ids.tolist() == [t for s in seqs for t in s]
    assert batch.positions.tolist() == [i for s in seqs for i in range(len(s))]
    assert batch.token_type_ids.tolist() == [t for s in types for t in s]
    assert batch.cu_seqlens.tolist() == [sum(map(len, seqs[:i])) for i in range(len(seqs) + 1)]
    assert batch.max_seqlen == max(map(len, seqs))
    assert batch.input_ids.dtype == batch.positions.dtype == torch.long
    empty = PackedBatch.from_token_lists([])
    assert empty.num_tokens == 0 and empty.cu_seqlens.tolist() == [0] and empty.max_seqlen == 0


@pytest.mark.slow
def test_engine_sizes_every_thread_pool_to_its_budget() -> None:
    """In a fresh process (torch's inter-op pool can be sized only before its first use)."""
    code = (
        "import json, os, shoal\n"
        "with shoal.Engine(threads=1) as e:\n"
        "    p = e.core.threads\n"
        "    import torch\n"
        "    print(json.dumps([p.torch_threads, p.interop_threads, p.tokenizer_threads,"
        " torch.get_num_threads(), os.environ['RAYON_NUM_THREADS']]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAYON_NUM_THREADS"}
    env |= {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [1, 1, 1, 1, "1"]
