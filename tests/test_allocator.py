"""An idle worker gives the memory its batches freed back to the OS (glibc's malloc for real, in a child
process so that this process's heaps do not blur the figures)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

IDLE = """
import json, time
import shoal
from engine.model.allocator import resident_bytes

texts = [f"passage {i} " + "many words in a long passage " * 60 for i in range(64)]
with shoal.Engine(threads=1) as engine:
    engine.encode("sentence-transformers/all-MiniLM-L6-v2", texts)
    busy = resident_bytes()
    time.sleep(3)
    idle = resident_bytes()
print(json.dumps({"busy": busy, "idle": idle}))
"""


def after_idle(idle_s: str) -> dict[str, int]:
    env = {**os.environ, "SHOAL_IDLE_RELEASE_S": idle_s, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(IDLE)], capture_output=True, text=True, cwd=REPO, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_idle_worker_returns_freed_memory_to_the_os() -> None:
    kept, released = after_idle("0"), after_idle("0.5")
    kept_mib, released_mib = ((r["busy"] - r["idle"]) / 2**20 for r in (kept, released))
    print(f"\nreturned after 3 s idle: {released_mib:.1f} MiB (SHOAL_IDLE_RELEASE_S=0: {kept_mib:.1f} MiB)")
    assert kept_mib < 8  # never released: glibc keeps it
    assert released_mib > 24
