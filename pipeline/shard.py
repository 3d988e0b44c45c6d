"""Sharded ingest: which files of a root one of N writers takes, by a stable hash of the file's relative path.

`shoal ingest --shard I/N` (or SHOAL_SHARD=I/N, or Kubernetes' JOB_COMPLETION_INDEX with SHOAL_SHARD_COUNT=N)
walks the whole root, keeps the files whose path hashes to I, and cleans up only the manifest records it owns:
a file gone from the root is removed by the shard its path hashes to. The hash is of the path relative to the
root (blake2b, not Python's salted `hash`), so every pod that mounts the root elsewhere agrees on the split.

Changing N between runs loses nothing: the manifest is keyed by path, every path belongs to exactly one shard
under any N, and a shard skips an unchanged file whichever shard wrote it last. Running two counts at once is
refused (SHARD_COUNT_CHANGED): their shares would overlap.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.config import ConfigError

_FORM = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0-based)."""

    index: int
    count: int

    def owns(self, rel: str) -> bool:
        return shard_of(rel, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(rel: str, count: int) -> int:
    """The shard (of `count`) a relative path belongs to; stable across processes, machines and versions."""
    digest = hashlib.blake2b(rel.replace("\\", "/").encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def parse_shard(text: str, where: str = "--shard") -> Shard:
    """`I/N` with 0 <= I < N; anything else is a one-line INVALID_SHARD error."""
    m = _FORM.match(text)
    if not m:
        raise ConfigError(f"{where} {text!r}: expected I/N, e.g. 0/4 (shard 0 of 4)", code="INVALID_SHARD")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1:
        raise ConfigError(f"{where} {text!r}: the shard count must be at least 1", code="INVALID_SHARD")
    if index >= count:
        raise ConfigError(f"{where} {text!r}: shards of {count} are numbered 0 to {count - 1}", code="INVALID_SHARD")
    return Shard(index, count)


def shard_from(option: str | None, env: Mapping[str, str]) -> Shard | None:
    """The shard of this process: --shard, else SHOAL_SHARD, else JOB_COMPLETION_INDEX of SHOAL_SHARD_COUNT."""
    if option:
        return parse_shard(option)
    if env.get("SHOAL_SHARD"):
        return parse_shard(env["SHOAL_SHARD"], "SHOAL_SHARD")
    index = env.get("JOB_COMPLETION_INDEX")
    if index is None:
        return None
    count = env.get("SHOAL_SHARD_COUNT")
    if not count:
        raise ConfigError(
            "JOB_COMPLETION_INDEX is set but SHOAL_SHARD_COUNT is not: set it to the Job's completions",
            code="INVALID_SHARD",
        )
    return parse_shard(f"{index}/{count}", "JOB_COMPLETION_INDEX/SHOAL_SHARD_COUNT")
