"""Sharded ingest's pieces: the I/N form and its sources, a stable split, and leases per shard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from connectors import open_store
from pipeline.config import ConfigError
from pipeline.manifest import Manifest, StoreLocked
from pipeline.manifest_store import StoreManifest
from pipeline.shard import Shard, parse_shard, shard_from, shard_of


@pytest.mark.parametrize("bad", ["5/4", "4/4", "0/0", "-1/4", "1", "a/b", "1/4/2", ""])
def test_bad_shards_are_one_line_errors(bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_shard(bad)
    assert e.value.code == "INVALID_SHARD" and "\n" not in e.value.message


def test_shard_sources_in_order() -> None:
    assert shard_from("1/4", {"SHOAL_SHARD": "2/4"}) == Shard(1, 4)
    assert shard_from(None, {"SHOAL_SHARD": "2/4", "JOB_COMPLETION_INDEX": "0"}) == Shard(2, 4)
    assert shard_from(None, {"JOB_COMPLETION_INDEX": "3", "SHOAL_SHARD_COUNT": "4"}) == Shard(3, 4)
    assert shard_from(None, {}) is None
    with pytest.raises(ConfigError, match="SHOAL_SHARD_COUNT"):
        shard_from(None, {"JOB_COMPLETION_INDEX": "3"})
    with pytest.raises(ConfigError, match="numbered 0 to 3"):
        shard_from(None, {"JOB_COMPLETION_INDEX": "4", "SHOAL_SHARD_COUNT": "4"})


def test_split_is_a_partition_and_the_same_in_another_process() -> None:
    paths = [f"dir{i % 7}/file-{i}.md" for i in range(400)]
    shares = [[p for p in paths if Shard(i, 4).owns(p)] for i in range(4)]
    assert sorted(sum(shares, [])) == sorted(paths) and all(len(s) > 50 for s in shares)
    code = "import sys; from pipeline.shard import shard_of; print([shard_of(p, 4) for p in sys.argv[1:]])"
    other = subprocess.run([sys.executable, "-c", code, *paths[:20]], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == str([shard_of(p, 4) for p in paths[:20]])


def test_sqlite_leases_per_shard(tmp_path: Path) -> None:
    ms = [Manifest(tmp_path / "manifest.sqlite") for _ in range(5)]
    ms[0].lock(Shard(0, 4))
    ms[1].lock(Shard(1, 4))  # two shards of one count write side by side
    with pytest.raises(StoreLocked, match="shard 1/4 is already"):
        ms[2].lock(Shard(1, 4))
    with pytest.raises(StoreLocked) as e:
        ms[2].lock(Shard(0, 3))
    assert e.value.code == "SHARD_COUNT_CHANGED"
    with pytest.raises(StoreLocked):
        ms[3].lock()  # a whole-root run waits for the shards
    ms[0].unlock()
    ms[1].unlock()
    ms[2].lock(Shard(0, 3))  # the count changes once the old shards are done
    ms[2].unlock()
    ms[3].lock()
    with pytest.raises(StoreLocked):
        ms[4].lock(Shard(2, 4))
    for m in ms:
        m.close()


def test_store_leases_per_shard(tmp_path: Path) -> None:
    store = open_store(f"lancedb://{tmp_path}")
    a, b, c = (StoreManifest(store.state_table(), store.uri) for _ in range(3))
    try:
        a.lock(Shard(0, 2))
        b.lock(Shard(1, 2))
        with pytest.raises(StoreLocked, match="another ingest"):
            c.lock(Shard(1, 2))
        with pytest.raises(StoreLocked) as e:
            c.lock(Shard(0, 3))
        assert e.value.code == "SHARD_COUNT_CHANGED"
        with pytest.raises(StoreLocked):
            c.lock()
        a.unlock()
        b.unlock()
        c.lock()
        with pytest.raises(StoreLocked):
            a.lock(Shard(0, 2))
    finally:
        for m in (a, b, c):
            m.close()


@pytest.mark.parametrize(("option", "env"), [("5/4", {}), ("0/0", {}), (None, {"SHOAL_SHARD": "x"})])
def test_cli_refuses_a_bad_shard_before_anything_is_created(tmp_path: Path, option, env) -> None:
    from tests.cli_support import assert_short_error, shoal

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nsome text\n")
    args = ["ingest", "docs", "--db", "lancedb://./store"] + (["--shard", option] if option else [])
    assert_short_error(shoal(*args, cwd=tmp_path, env=env), "INVALID_SHARD", 1)
    assert not (tmp_path / "store").exists()
