"""`shoal status`: a running server's health, models and their residency tiers, queue and throughput."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def fetch_status(url: str, api_key: str | None) -> dict[str, Any]:
    """GET /v1/status (and /readyz's verdict is inside it); typed errors for refusals, UNREACHABLE when down."""
    import httpx

    from engine.client.http import raise_for_error
    from engine.errors import Unreachable

    headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"} if api_key else {}
    try:
        r = httpx.get(f"{url.rstrip('/')}/v1/status", headers=headers, timeout=10.0)
    except httpx.TransportError as e:
        raise Unreachable(f"cannot reach a shoal server at {url}: {type(e).__name__}: {e}") from None
    raise_for_error(r)
    data: dict[str, Any] = r.json()
    return data


def describe(s: dict[str, Any], url: str) -> list[str]:
    """The status as a few lines of text."""
    q, rates, tot = s["queue"], s["rates"], s["totals"]
    lines = [f"shoal {s['version']} at {url}: {s['status']} ({s['mode']}, device {s['device']})"]
    lines.append(f"queue      {q['kind']}: {q['pending']:.0f} pending, {q['held']:.0f} held, "
                 f"{q['dead_letters']:.0f} dead letters")  # fmt: skip
    if rates.get("window_s"):
        lines.append(f"throughput {rates['requests']:.2f} req/s, {rates['items']:.2f} items/s, "
                     f"{rates['tokens']:.0f} tokens/s (last {rates['window_s']:.0f} s)")  # fmt: skip
    lines.append(f"totals     {tot['requests']:.0f} requests ({tot['errors']:.0f} errors), {tot['items']:.0f} items, "
                 f"{tot['tokens']:.0f} tokens")  # fmt: skip
    for tier in ("device", "host"):
        t = s["tiers"][tier]
        names = [m["name"] for m in s["models"] if m["tier"] == tier]
        held = f": {', '.join(names)}" if names else ""
        lines.append(f"{tier:<10} {t['models']} models, {_bytes(t['bytes'])} of {_bytes(t['budget'])}{held}")
    ready = sum(1 for m in s["models"] if m["weights"]["available"])
    lines.append(f"models     {len(s['models'])} in the catalogue, {ready} with weights on the server")
    return lines


def status(
    url: Annotated[str, typer.Option(envvar="SHOAL_URL", help="the server")] = "http://127.0.0.1:8080",
    api_key: Annotated[str | None, typer.Option(envvar="SHOAL_API_KEY", help="the server's API key")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the server's /v1/status answer")] = False,
) -> None:
    """Show a server's health, its models' residency tiers, its queue and its throughput.

    Exit code 2 when the server cannot be reached, 1 when it refuses (a wrong API key).
    """
    s = fetch_status(url, api_key)
    if as_json:
        print(json.dumps(s, indent=2))
        return
    print("\n".join(describe(s, url)))
    if s["status"] != "ready":
        raise typer.Exit(2)
