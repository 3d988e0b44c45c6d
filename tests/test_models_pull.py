"""`shoal models pull MODEL...` on a fresh HOME: a model already here is reported and nothing is fetched; with
no network (offline mode, or a hub that does not answer) it fails in one line with exit code 2 and leaves
the cache as it was; an unknown model is exit 1; and a MODEL_UNAVAILABLE error names the pull command."""

from __future__ import annotations

from pathlib import Path

from tests.cli_support import assert_short_error, shoal
from tests.helpers import free_port
from tests.test_models_command import CARD, fake_hf_cache

RERANKER = "cross-encoder/ms-marco-MiniLM-L-6-v2"


def fresh(tmp_path: Path, offline: bool = True) -> dict[str, str]:
    """A new user's environment: its own HOME and an empty Hugging Face cache; a hub that refuses connections."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "HF_HOME": str(home / ".cache" / "huggingface"),
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "HF_HUB_OFFLINE": "1" if offline else "0",
        "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # nothing listens: no download can succeed
    }


def test_pull_offline_is_one_line_and_exit_2(tmp_path: Path) -> None:
    r = shoal("models", "pull", RERANKER, cwd=tmp_path, env=fresh(tmp_path))
    lines = assert_short_error(r, "OFFLINE", 2)
    assert RERANKER in lines[0] and "HF_HUB_OFFLINE" in lines[1]
    assert not (tmp_path / "hub").exists() or not any((tmp_path / "hub").iterdir())


def test_pull_with_the_hub_unreachable_is_one_line_and_exit_2(tmp_path: Path) -> None:
    r = shoal("models", "pull", RERANKER, cwd=tmp_path, env=fresh(tmp_path, offline=False))
    lines = assert_short_error(r, "HUB_UNREACHABLE", 2)
    assert RERANKER in lines[0] and "resumes" in lines[1]
    assert not list((tmp_path / "hub").rglob("*.safetensors"))


def test_pull_of_a_model_already_here_fetches_nothing(tmp_path: Path) -> None:
    """Online but with a hub that does not answer: a model in the cache, and the packaged default, are
    reported where they are, exit 0."""
    snap = fake_hf_cache(tmp_path / "hub")
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "cached.yaml").write_text(CARD)
    env = fresh(tmp_path, offline=False)
    names = ["test/cached-model", "sentence-transformers/all-MiniLM-L6-v2"]
    r = shoal("models", "pull", *names, "--model-dir", str(cards), cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    cached, default = r.stdout.splitlines()
    assert cached == f"test/cached-model: already here (hf-cache: {snap})", r.stdout
    assert default.startswith("sentence-transformers/all-MiniLM-L6-v2: already here (package: "), r.stdout


def test_pull_of_an_unknown_model_is_exit_1_before_any_download(tmp_path: Path) -> None:
    r = shoal("models", "pull", RERANKER, "acme/no-such-model", cwd=tmp_path, env=fresh(tmp_path, offline=False))
    assert_short_error(r, "MODEL_NOT_FOUND", 1)


def test_model_unavailable_names_the_pull_command(tmp_path: Path) -> None:
    r = shoal("encode", "a harbour at dawn", "--model", "BAAI/bge-m3", cwd=tmp_path, env=fresh(tmp_path))
    lines = assert_short_error(r, "MODEL_UNAVAILABLE", 1)
    assert "`shoal models pull BAAI/bge-m3`" in lines[1], lines
