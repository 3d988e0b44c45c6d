"""The peers bench/roofline.py runs beside shoal: what a CPU user would pick instead, exported offline here.

- sentence-transformers in float32 and in bfloat16 (the model cast with `.to(torch.bfloat16)`);
- ONNX Runtime on the model exported from the local MiniLM folder with `torch.onnx.export`, in float32 and in
  its dynamic int8 export (`onnxruntime.quantization.quantize_dynamic`, int8 weights per channel: what
  optimum's avx512_vnni / avx2 configs ask for);
- OpenVINO on the same ONNX file, compiled for the CPU with its default hints (it picks bf16 itself where the
  CPU has AMX; the precision it chose is reported);
- shoal's default: an engine with a fresh profile store and nothing tuned, timed once its first load's
  background precision tune has finished.

ONNX Runtime and OpenVINO run the loop sentence-transformers' own ONNX/OpenVINO backends run: sort by length,
batches of 32 padded to their longest, mean pooling over the attention mask, then normalise.
(sentence-transformers' `backend=` needs optimum, whose releases pin an older transformers than shoal's.)
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 32
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def export_onnx(folder: Path, out: Path) -> tuple[Path, Path]:
    """float32 and int8 ONNX files of the checkpoint in `folder` (no download)."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

    sample = AutoTokenizer.from_pretrained(str(folder))(["a short one", "and a longer second text"], padding=True)
    args = tuple(torch.tensor(sample[k]) for k in INPUTS)
    fp32, int8 = out / "model.onnx", out / "model_int8.onnx"
    axes = {k: {0: "batch", 1: "tokens"} for k in [*INPUTS, "last_hidden_state"]}
    torch.onnx.export(
        Hidden(), args, str(fp32), input_names=INPUTS, output_names=["last_hidden_state"], dynamic_axes=axes,
        opset_version=17, dynamo=False,
    )  # fmt: skip
    quantize_dynamic(str(fp32), str(int8), per_channel=True, weight_type=QuantType.QInt8)
    return fp32, int8


class PaddedPeer:
    """A runtime that takes padded int64 batches and returns the last hidden state, behind ST's encode loop."""

    label = ""
    precision = "float32"

    def __init__(self, folder: Path, max_len: int) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.max_len = max_len

    def hidden(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: list[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), 0), dtype=np.float32)
        rows: list[np.ndarray] = []
        for start in range(0, len(order), BATCH):
            batch = [texts[i] for i in order[start : start + BATCH]]
            enc = self.tokenizer(batch, padding=True, truncation=True, max_length=self.max_len, return_tensors="np")
            feeds = {k: enc[k].astype(np.int64) for k in INPUTS}
            hidden = self.hidden(feeds).astype(np.float32)
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
            rows.append(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))
        out = np.concatenate(rows)
        back = np.empty_like(out)
        back[order] = out
        return back


class OrtPeer(PaddedPeer):
    def __init__(self, folder: Path, max_len: int, path: Path, threads: int, precision: str) -> None:
        import onnxruntime as ort

        super().__init__(folder, max_len)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        # its pool's threads would spin on after each run, taking the cores from whichever system runs next
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.label, self.precision = f"ONNX Runtime {ort.__version__}", precision

    def hidden(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.session.run(None, feeds)[0])


class OpenVinoPeer(PaddedPeer):
    def __init__(self, folder: Path, max_len: int, path: Path, threads: int) -> None:
        import openvino as ov

        super().__init__(folder, max_len)
        core = ov.Core()
        self.compiled = core.compile_model(ov.convert_model(str(path)), "CPU", {"INFERENCE_NUM_THREADS": threads})
        hint = str(self.compiled.get_property("INFERENCE_PRECISION_HINT")).lower()
        self.label = f"OpenVINO {ov.__version__.split('-')[0]}"
        self.precision = "bfloat16" if "bf" in hint else "float16" if "16" in hint else "float32"
        self.request = self.compiled.create_infer_request()

    def hidden(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.request.infer(feeds)[0])


class StPeer:
    def __init__(self, folder: Path, precision: str) -> None:
        import sentence_transformers
        import torch
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(folder), device="cpu")
        if precision == "bfloat16":
            self.model = self.model.to(torch.bfloat16)
        self.label, self.precision = f"sentence-transformers {sentence_transformers.__version__}", precision

    def encode(self, texts: list[str]) -> np.ndarray:
        vecs = self.model.encode(texts, batch_size=BATCH, convert_to_tensor=True)
        return np.asarray(vecs.float().numpy(), dtype=np.float32)


class ShoalDefault:
    """shoal as it ships: a fresh profile store, auto-tune on; timed once the first load's tune has finished."""

    label = "shoal default (fresh profile store)"

    def __init__(self, model: str, threads: int, max_items: int, texts: list[str]) -> None:
        import shoal

        self.store = Path(tempfile.mkdtemp(prefix="shoal-default-")) / "profiles.json"
        self.model = model
        self.engine = shoal.Engine(threads=threads, max_items=max_items, profile_store=self.store, auto_tune=True)
        started = time.perf_counter()
        self.engine.encode(model, texts[:8])  # the first load: float32 serves, the tune starts behind it
        while self.info()["precision_in_use"]["tuning"]:
            time.sleep(0.2)
        self.tune_seconds = time.perf_counter() - started
        self.precision = self.info()["precision_in_use"]["precision"]

    def info(self) -> dict[str, Any]:
        return next(m for m in self.engine.models() if m["name"] == self.model)

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([r["dense"] for r in self.engine.encode(self.model, texts)])

    def close(self) -> None:
        self.engine.close()


def make_peers(folder: Path, max_len: int, threads: int, work: Path) -> dict[str, Any]:
    """Every peer but sentence-transformers float32 (bench/roofline.py's reference), loaded: key -> object with
    `label`, `precision`, `encode(texts)`."""
    fp32, int8 = export_onnx(folder, work)
    return {
        "st:bfloat16": StPeer(folder, "bfloat16"),
        "ort:float32": OrtPeer(folder, max_len, fp32, threads, "float32"),
        "ort:int8": OrtPeer(folder, max_len, int8, threads, "int8"),
        "openvino:default": OpenVinoPeer(folder, max_len, fp32, threads),
    }
