"""shoal's bfloat16 CPU kernels for CPUs with AVX512-BF16: attention (csrc/varlen_attention.cpp) and
LayerNorm (csrc/layer_norm.cpp), built into one library once per machine with the system's C++ compiler on
first use, cached, then loaded into torch as `torch.ops.shoal_cpu`.

Why a kernel of our own: torch's CPU flash attention is called once per run of equal-length sequences, and a
server's batches mix lengths, so each call carries a few short sequences; at head size 32 it took over a third
of MiniLM's bf16 forward pass while doing a tenth of its FLOPs. No library offers packed variable-length
attention on the CPU. This one takes the whole packed batch in one call (work shared by (sequence, head),
longest first); on an AMX Xeon it ran 2.2x torch's SDPA and the bf16 forward 1.36x (bench/cpu_attention.py,
docs/performance.md).

Why a LayerNorm of our own: torch's CPU LayerNorm ran bfloat16 at 15 GB/s, slower than its float32 (41 GB/s
at MiniLM's [4096, 384]); ours reads each row once and rounds once.

Anything that stops them (no compiler, no AVX512-BF16, a build error, `SHOAL_CPU_KERNELS=0`) leaves torch's
SDPA and LayerNorm in use.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
from torch import Tensor

log = logging.getLogger("shoal.kernels")

SOURCES = [Path(__file__).with_name("csrc") / name for name in ("varlen_attention.cpp", "layer_norm.cpp")]
FLAGS = ["-O3", "-std=c++20", "-shared", "-fPIC", "-fopenmp", "-march=x86-64-v3"]
FLAGS += ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mamx-tile", "-mamx-bf16"]

_lock = threading.Lock()
_enabled = True
_tiles = True  # AMX where the CPU has it; False: the kernel's AVX512-BF16 path everywhere
_amx = False  # this CPU has AMX-BF16 and Linux granted the tile registers (set when the kernels load)
_cache_dir = Path("~/.cache/shoal/kernels").expanduser()
_loaded: bool | None = None  # None: not tried yet


def configure(enabled: bool, cache_dir: Path | None = None, tiles: bool = True) -> None:
    """Turn the kernels on or off for this process (SHOAL_CPU_KERNELS), say where builds are kept, and whether
    attention may use AMX tiles (tests and benches run its AVX512-BF16 path on AMX CPUs with tiles=False)."""
    global _enabled, _cache_dir, _tiles
    _enabled, _tiles = enabled, tiles
    if cache_dir is not None:
        _cache_dir = cache_dir


def cpu_supported() -> bool:
    """True when this CPU has the instructions the kernels need (AVX512-BF16; AMX is optional)."""
    return bool(torch.cpu.get_capabilities().get("avx512_bf16", False))


def _amx_granted() -> bool:
    """True when this CPU has AMX-BF16 tiles and Linux lets this process use them (torch asks for them)."""
    caps = torch.cpu.get_capabilities()
    return bool(caps.get("amx_bf16") and caps.get("amx_tile") and torch.cpu._init_amx())


def usable(q: Tensor, causal: bool, window: int | None, gqa: bool) -> bool:
    """True when the attention kernel can run this call (and is built, building it the first time)."""
    if not _enabled or q.device.type != "cpu" or q.dtype != torch.bfloat16:
        return False
    if causal or window is not None or gqa or q.shape[-1] % 32 != 0 or q.requires_grad:
        return False
    return ready()


def ready() -> bool:
    """Load the kernels, building them first if this machine has no build of these sources yet."""
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            _loaded = _load()
    return _loaded


def _load() -> bool:
    global _amx
    if not cpu_supported():
        return False
    _amx = _amx_granted()
    try:
        library = _build()
        torch.ops.load_library(str(library))  # type: ignore[no-untyped-call]
    except (OSError, subprocess.SubprocessError, RuntimeError) as e:
        log.warning("shoal's CPU kernels unavailable, using torch's attention and LayerNorm instead: %s", e)
        return False
    return True


def build_key() -> str:
    """What a build depends on: the sources, the flags, torch's version and C++ ABI."""
    h = hashlib.sha256(b"".join(source.read_bytes() for source in SOURCES))
    h.update(" ".join(FLAGS).encode())
    h.update(f"{torch.__version__} {torch._C._GLIBCXX_USE_CXX11_ABI}".encode())
    return h.hexdigest()[:16]


def _build() -> Path:
    """The shared library for these sources and torch, compiled into the cache unless already there."""
    target = _cache_dir / f"shoal_cpu_kernels_{build_key()}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no C++ compiler found (install g++, or set CXX)")
    from torch.utils import cpp_extension  # imported only when a build is needed

    includes = [f"-isystem{p}" for p in cpp_extension.include_paths()]
    lib_dirs = cpp_extension.library_paths()
    libs = [f"-L{p}" for p in lib_dirs] + ["-lc10", "-ltorch_cpu"] + [f"-Wl,-rpath,{p}" for p in lib_dirs]
    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    _cache_dir.mkdir(parents=True, exist_ok=True)
    log.info("building shoal's CPU kernels (once per machine, about 10 s)")
    # built beside its final name and moved there whole, so processes building at once never load half a file
    with tempfile.TemporaryDirectory(dir=_cache_dir) as tmp:
        out = Path(tmp) / target.name
        cmd = [compiler, *FLAGS, abi, *includes, *map(str, SOURCES), "-o", str(out), *libs]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-600:]}")
        os.replace(out, target)
    return target


def varlen_attention_bf16(q: Tensor, k: Tensor, v: Tensor, cu_seqlens: Tensor, key_lengths: Tensor | None) -> Tensor:
    """softmax(q k^T / sqrt(D)) v inside each sequence. q, k, v: [T, H, D] bf16 -> [T, H, D] bf16."""
    keys = key_lengths if key_lengths is not None else cu_seqlens.new_empty(0)
    scale = q.shape[-1] ** -0.5
    out: Tensor = torch.ops.shoal_cpu.varlen_attention_bf16(
        q.contiguous(),
        k.contiguous(),
        v.contiguous(),
        cu_seqlens.int().contiguous(),
        keys.int(),
        scale,
        _tiles and _amx,
    )
    return out


def norm_usable(x: Tensor) -> bool:
    """True when the LayerNorm kernel can normalise `x` (bf16 on the CPU, no autograd; built if need be)."""
    return _enabled and x.device.type == "cpu" and x.dtype == torch.bfloat16 and not x.requires_grad and ready()


def layer_norm_bf16(x: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    """LayerNorm over the last dimension. x: [..., H] bf16 -> [..., H] bf16."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    none = weight.new_empty(0)
    out: Tensor = torch.ops.shoal_cpu.layer_norm_bf16(rows, weight, none if bias is None else bias, eps)
    return out.view(x.shape)
