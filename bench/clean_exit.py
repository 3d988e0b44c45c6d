"""Exit time of the first script a user writes: seconds from its last line to the end of the process.

Each run is a fresh interpreter with a fresh profile store, so the first load's precision tune is still running
when the script ends. Two ways are timed alternately: no `close()` at all (interpreter exit stops the engine),
and the same lines in a `with shoal.Engine()` block, the baseline. Also reports exit codes and whether anything
reached stderr.

    .venv/bin/python bench/clean_exit.py [--runs 10]

Results: bench/results/clean_exit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
LAST = "import time; print('LAST', time.time())"
SCRIPTS = {
    "no close": f"import shoal\nengine = shoal.Engine()\nprint(engine.encode({MODEL!r}, 'hello')['dense'][:3])\n{LAST}\n",
    "with block": (
        f"import shoal\nwith shoal.Engine() as engine:\n    print(engine.encode({MODEL!r}, 'hello')['dense'][:3])\n{LAST}\n"
    ),
}


def one(script: str) -> tuple[float, int, str]:
    """(seconds from the script's last line to its exit, exit code, stderr)."""
    store = Path(tempfile.mkdtemp(prefix="shoal-exit-")) / "profiles.json"
    env = {**os.environ, "SHOAL_PROFILE_STORE": str(store)}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    ended = time.time()
    last = [line for line in run.stdout.splitlines() if line.startswith("LAST ")]
    return (ended - float(last[-1].split()[1]) if last else float("nan")), run.returncode, run.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    seconds: dict[str, list[float]] = {k: [] for k in SCRIPTS}
    codes: dict[str, list[int]] = {k: [] for k in SCRIPTS}
    noisy: dict[str, int] = dict.fromkeys(SCRIPTS, 0)
    for _ in range(args.runs):
        for name, script in SCRIPTS.items():
            secs, code, err = one(script)
            seconds[name].append(secs)
            codes[name].append(code)
            noisy[name] += bool(err.strip())
    report = {
        name: {
            "median_s": statistics.median(seconds[name]),
            "max_s": max(seconds[name]),
            "exit_codes": sorted(set(codes[name])),
            "runs_with_stderr": noisy[name],
            "runs": args.runs,
        }
        for name in SCRIPTS
    }
    report["ratio_median_no_close_to_with"] = report["no close"]["median_s"] / report["with block"]["median_s"]
    out = ROOT / "bench" / "results" / "clean_exit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
