"""Container health check for the shoal image: exit 0 when the process in this container answers, else 1.

The gateway (`shoal serve`) answers GET /healthz; a worker (`shoal worker --metrics-port P`) opens its
/metrics port once it is ready. SHOAL_HEALTH_URL overrides the URL; otherwise it is read off the command
line of PID 1. Standard library only: it runs in the image's Python with nothing else.
"""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Sequence

DEFAULT_PORT = 8080


def option(argv: Sequence[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in argv, if present."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def health_url(argv: Sequence[str], env: dict[str, str]) -> str:
    """Where to look: the worker's metrics port, or the gateway's /healthz."""
    if env.get("SHOAL_HEALTH_URL"):
        return env["SHOAL_HEALTH_URL"]
    if "worker" in argv:
        port = option(argv, "--metrics-port")
        if port is None:
            raise SystemExit("a worker without --metrics-port has nothing to check; set SHOAL_HEALTH_URL")
        return f"http://127.0.0.1:{port}/metrics"
    port = option(argv, "--port") or env.get("SHOAL_PORT") or str(DEFAULT_PORT)
    return f"http://127.0.0.1:{port}/healthz"


def pid1_argv() -> list[str]:
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def main() -> int:
    url = health_url(pid1_argv(), dict(os.environ))
    try:
        with urllib.request.urlopen(url, timeout=4) as response:  # noqa: S310 - a loopback URL we built
            return 0 if response.status == 200 else 1
    except OSError as e:
        print(f"unhealthy: {url}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
