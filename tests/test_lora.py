"""LoRA: PEFT adapters match peft's merged reference; mixed adapters in one packed batch; cache; validation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.catalogue.catalogue import Catalogue
from engine.config import EngineSettings
from engine.errors import InvalidInput
from engine.model.loader import load_model
from engine.model.lora import AdapterCache
from engine.model.sequences import Encoded
from engine.runtime import AsyncEngine
from tests.helpers import make_tiny_bert

peft = pytest.importorskip("peft")
TEXTS = ["the cat sat on the mat", "a small dog in paris", "hello world from the engine"]


def make_adapter(base: Path, out: Path, seed: int) -> Path:
    from transformers import BertModel

    torch.manual_seed(seed)
    model = BertModel.from_pretrained(str(base), add_pooling_layer=False)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value", "dense"], init_lora_weights=False)
    peft.get_peft_model(model, config).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("lora")
    base = make_tiny_bert(root / "base", seed=3)
    make_adapter(base, root / "adapters" / "one", seed=11)
    make_adapter(base, root / "adapters" / "two", seed=12)
    return base, root / "adapters"


def reference(base: Path, adapter: Path | None, ids: list[list[int]]) -> np.ndarray:
    """Mean-pooled, normalised vectors from transformers with peft's adapter merged into the weights."""
    from transformers import BertModel

    model = BertModel.from_pretrained(str(base), add_pooling_layer=False).eval()
    if adapter is not None:
        model = peft.PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    rows = []
    with torch.no_grad():
        for seq in ids:
            hidden = model(input_ids=torch.tensor([seq])).last_hidden_state[0]
            rows.append(torch.nn.functional.normalize(hidden.mean(0), dim=-1).numpy())
    return np.stack(rows)


async def test_adapter_matches_peft_merged(setup: tuple[Path, Path]) -> None:
    base, adapters = setup
    async with AsyncEngine(EngineSettings(lora_dir=adapters)) as engine:
        got = np.stack([r["dense"] for r in await engine.encode(str(base), TEXTS, options={"lora": "one"})])
        plain = np.stack([r["dense"] for r in await engine.encode(str(base), TEXTS)])
        loaded = await engine.registry.get(str(base))
        ids = loaded.tokenizer(TEXTS, truncate=True)
    np.testing.assert_allclose(got, reference(base, adapters / "one", ids), atol=1e-5)
    np.testing.assert_allclose(plain, reference(base, None, ids), atol=1e-5)
    assert np.abs(got - plain).max() > 1e-3  # the adapter really changes the output


def test_two_adapters_in_one_batch(setup: tuple[Path, Path]) -> None:
    """One packed forward pass with rows for adapter one, adapter two and the base model."""
    base, adapters = setup
    loaded = load_model(Catalogue().get(str(base)), "cpu", True, AdapterCache(4, adapters))
    ids = loaded.tokenizer(TEXTS, truncate=True)
    names = ["one", "two", None]
    mixed = [Encoded(list(s), lora=n) for s, n in zip(ids, names, strict=True)]
    got = torch.nn.functional.normalize(loaded.embed(mixed), dim=-1).numpy()
    for row, seq, name in zip(got, ids, names, strict=True):
        ref = reference(base, adapters / name if name else None, [seq])[0]
        np.testing.assert_allclose(row, ref, atol=1e-5)


async def test_mixed_requests_through_the_engine(setup: tuple[Path, Path]) -> None:
    base, adapters = setup
    async with AsyncEngine(EngineSettings(lora_dir=adapters, batch_wait_ms=50)) as engine:
        single = {
            n: (await engine.encode(str(base), TEXTS[0], options={"lora": n} if n else None))["dense"]
            for n in ("one", "two", None)
        }
        got = await asyncio.gather(
            *(engine.encode(str(base), TEXTS[0], options={"lora": n} if n else None) for n in ("one", "two", None))
        )
        for r, n in zip(got, ("one", "two", None), strict=True):
            np.testing.assert_allclose(r["dense"], single[n], atol=1e-6)
        assert engine.registry.adapters.hits >= 3 and engine.registry.adapters.misses == 2


async def test_unknown_adapter_is_invalid_input(setup: tuple[Path, Path]) -> None:
    base, adapters = setup
    async with AsyncEngine(EngineSettings(lora_dir=adapters)) as engine:
        with pytest.raises(InvalidInput, match="no LoRA adapter 'nope'"):
            await engine.encode(str(base), "hello", options={"lora": "nope"})


async def test_card_profile_selects_adapter(setup: tuple[Path, Path], tmp_path: Path) -> None:
    base, adapters = setup
    (tmp_path / "tiny.yaml").write_text(
        f"id: tiny-lora\nsource: {{path: {base}}}\nmax_seq_len: 64\nloras: {{one: {adapters / 'one'}}}\n"
        "profiles: {default: {max_batch_tokens: 1024}, tuned-one: {max_batch_tokens: 1024, lora: one}}\n"
    )
    async with AsyncEngine(EngineSettings(model_dir=tmp_path)) as engine:
        by_profile = await engine.encode("tiny-lora", "hello world", options={"profile": "tuned-one"})
        by_name = await engine.encode("tiny-lora", "hello world", options={"lora": "one"})
        plain = await engine.encode("tiny-lora", "hello world")
    np.testing.assert_allclose(by_profile["dense"], by_name["dense"], atol=1e-6)
    assert np.abs(by_profile["dense"] - plain["dense"]).max() > 1e-3


async def test_adapter_applies_to_score_tasks(tmp_path: Path) -> None:
    """A cross-encoder scored through an adapter matches peft's merged reference; a bad adapter is a 400."""
    from transformers import BertForSequenceClassification

    from tests.tiny_models import make, write_card

    make("bert", "ForSequenceClassification", tmp_path / "ce", num_labels=1)
    torch.manual_seed(5)
    base_model = BertForSequenceClassification.from_pretrained(str(tmp_path / "ce"))
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], init_lora_weights=False)
    peft.get_peft_model(base_model, config).save_pretrained(str(tmp_path / "adapters" / "legal"))
    card = {
        "id": "tiny/ce",
        "family": "bert",
        "pooling": "cls",
        "max_seq_len": 64,
        "source": {"path": str(tmp_path / "ce")},
    }
    card |= {"tasks": ["score"], "outputs": ["score"], "score": {"kind": "classifier"}}
    card |= {"profiles": {"default": {"max_batch_tokens": 1024}}}
    write_card(tmp_path / "cards", card)
    docs = ["the cat sat on the mat", "paris is in france", "a dog"]
    settings = EngineSettings(model_dir=tmp_path / "cards", lora_dir=tmp_path / "adapters", offline=True)
    async with AsyncEngine(settings) as engine:
        tuned = await engine.score("tiny/ce", "where is paris", docs, options={"lora": "legal"})
        plain = await engine.score("tiny/ce", "where is paris", docs)
        loaded = await engine.registry.get("tiny/ce")
        with pytest.raises(InvalidInput, match="nope"):
            await engine.score("tiny/ce", "where is paris", docs, options={"lora": "nope"})
    plain_ref = BertForSequenceClassification.from_pretrained(str(tmp_path / "ce")).eval()
    merged_ref = peft.PeftModel.from_pretrained(
        BertForSequenceClassification.from_pretrained(str(tmp_path / "ce")), str(tmp_path / "adapters" / "legal")
    ).merge_and_unload()
    pairs = loaded.encode_pairs([("where is paris", d) for d in docs], truncate=True)
    scores = {}
    for name, result, ref in (("tuned", tuned, merged_ref.eval()), ("plain", plain, plain_ref)):
        scores[name] = {int(s["item_id"].split("-")[1]): s["score"] for s in result["scores"]}
        for i, enc in enumerate(pairs):
            with torch.no_grad():
                logit = ref(input_ids=torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids])).logits[0, 0]
            assert abs(scores[name][i] - torch.sigmoid(logit).item()) <= 1e-5
    assert max(abs(scores["tuned"][i] - scores["plain"][i]) for i in range(len(docs))) > 1e-4  # it really applies


async def test_an_adapter_rewritten_in_place_is_read_again(setup: tuple[Path, Path], tmp_path: Path) -> None:
    """The cache keys on the adapter's content, not its folder: the same folder with other weights (a re-tune)
    serves the new weights at once, and the first adapter's files put back are a cache hit again."""
    import shutil

    base, adapters = setup
    folder = tmp_path / "adapters" / "live"
    shutil.copytree(adapters / "one", folder)
    shutil.copytree(adapters / "two", folder.with_name("two"))
    async with AsyncEngine(EngineSettings(lora_dir=tmp_path / "adapters")) as engine:
        first = (await engine.encode(str(base), TEXTS[0], options={"lora": "live"}))["dense"]
        shutil.rmtree(folder)
        shutil.copytree(adapters / "two", folder)
        second = (await engine.encode(str(base), TEXTS[0], options={"lora": "live"}))["dense"]
        two = (await engine.encode(str(base), TEXTS[0], options={"lora": "two"}))["dense"]
        cache = engine.registry.adapters
        read = cache.misses  # "two" under its own name is the content "live" had: not read again
        shutil.rmtree(folder)
        shutil.copytree(adapters / "one", folder)
        again = (await engine.encode(str(base), TEXTS[0], options={"lora": "live"}))["dense"]
    np.testing.assert_allclose(second, two, atol=1e-6)
    np.testing.assert_allclose(again, first, atol=1e-6)
    assert np.abs(np.asarray(second) - np.asarray(first)).max() > 1e-3
    assert read == cache.misses == 2
