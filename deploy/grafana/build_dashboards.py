"""Write shoal's Grafana dashboards (classic JSON model) into deploy/grafana/dashboards/.

The JSON files are committed; this script is their source. After editing it run
    python deploy/grafana/build_dashboards.py && deploy/helm/sync-files.sh
(tests/test_deploy_grafana.py fails while the committed JSON differs from what this writes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
M = 'model=~"$model"'


def target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend, "range": True}


def panel(
    title: str,
    queries: list[tuple[str, str]],
    unit: str,
    *,
    kind: str = "timeseries",
    stack: bool = False,
    description: str = "",
) -> dict[str, Any]:
    """One panel; its position is set by `layout`."""
    custom: dict[str, Any] = {"fillOpacity": 10, "showPoints": "never"}
    if stack:
        custom.update(fillOpacity=60, stacking={"mode": "normal", "group": "A"})
    options: dict[str, Any] = {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    if kind == "stat":
        custom = {}
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        }
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
        "options": options,
        "targets": [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(queries)],
    }


def layout(rows: list[list[dict[str, Any]]], height: int = 8) -> list[dict[str, Any]]:
    """Give every panel an id and a gridPos: each row shares the 24-column width equally."""
    panels, y, next_id = [], 0, 1
    for row in rows:
        width = 24 // len(row)
        for i, p in enumerate(row):
            h = 4 if p["type"] == "stat" else height
            panels.append({"id": next_id, **p, "gridPos": {"h": h, "w": width, "x": i * width, "y": y}})
            next_id += 1
        y += max(4 if p["type"] == "stat" else height for p in row)
    return panels


def variables(model_source: str) -> dict[str, Any]:
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }
    query = f"label_values({model_source}, model)"
    model = {
        "name": "model",
        "label": "Model",
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": "model"},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {},
        "hide": 0,
        "sort": 1,
        "regex": "",
        "options": [],
    }
    return {"list": [datasource, model]}


def dashboard(
    uid: str, title: str, description: str, rows: list[list[dict[str, Any]]], model_source: str
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["shoal"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": []},
        "links": [{"title": "shoal dashboards", "type": "dashboards", "tags": ["shoal"], "asDropdown": True}],
        "templating": variables(model_source),
        "panels": layout(rows),
    }


def quantiles(metric: str, by: str, selector: str = "") -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by (le{by}) (rate({metric}_bucket{{{selector}}}[{RATE}])))",
            f"p{int(q * 100)}" + (" {{" + by.strip(", ") + "}}" if by else ""),
        )
        for q in (0.5, 0.95, 0.99)
    ]


def cluster() -> dict[str, Any]:
    errors = (
        f'sum(rate(shoal_requests_total{{code=~"5..",{M}}}[{RATE}])) / sum(rate(shoal_requests_total{{{M}}}[{RATE}]))'
    )
    rows = [
        [
            panel(
                "Requests/s", [(f"sum(rate(shoal_requests_total{{{M}}}[{RATE}]))", "requests/s")], "reqps", kind="stat"
            ),
            panel("5xx ratio", [(errors, "5xx")], "percentunit", kind="stat"),
            panel("Pending tasks", [("sum(shoal_queue_pending)", "pending")], "short", kind="stat"),
            panel("Workers up", [("sum(shoal_worker_up)", "workers")], "short", kind="stat"),
        ],
        [
            panel(
                "Requests/s by endpoint",
                [(f"sum by (endpoint) (rate(shoal_requests_total{{{M}}}[{RATE}]))", "{{endpoint}}")],
                "reqps",
            ),
            panel(
                "Errors/s by status",
                [(f'sum by (code) (rate(shoal_requests_total{{code!~"2..",{M}}}[{RATE}]))', "{{code}}")],
                "reqps",
            ),
        ],
        [
            panel("Latency (gateway in to response out)", quantiles("shoal_request_seconds", "", M), "s"),
            panel(
                "Latency p99 by endpoint",
                [
                    (
                        f"histogram_quantile(0.99, sum by (le, endpoint) (rate(shoal_request_seconds_bucket{{{M}}}[{RATE}])))",
                        "{{endpoint}}",
                    )
                ],
                "s",
            ),
        ],
        [
            panel(
                "Queue pending",
                [
                    ("max by (stream) (shoal_queue_pending)", "{{stream}}"),
                    (f"sum by (model) (shoal_queue_model_pending{{{M}}})", "{{model}}"),
                ],
                "short",
                description="Work-queue stream depth (KEDA scales the pools on their consumers' lag).",
            ),
            panel(
                "Queue wait p95 by model",
                [
                    (
                        f"histogram_quantile(0.95, sum by (le, model) (rate(shoal_queue_wait_seconds_bucket{{{M}}}[{RATE}])))",
                        "{{model}}",
                    )
                ],
                "s",
            ),
        ],
        [
            panel("Workers by pool", [("sum by (pool) (shoal_worker_up)", "{{pool}}")], "short", stack=True),
            panel("Tasks held by workers", [("sum by (instance) (shoal_queue_held)", "{{instance}}")], "short"),
            panel(
                "Redeliveries, dead letters, expired",
                [
                    (f"sum(rate(shoal_queue_redeliveries_total{{{M}}}[{RATE}]))", "redelivered"),
                    (f"sum(rate(shoal_queue_dead_letters_total{{{M}}}[{RATE}]))", "dead-lettered"),
                    (f"sum(rate(shoal_queue_expired_total{{{M}}}[{RATE}]))", "expired"),
                    (f"sum(rate(shoal_queue_duplicate_results_total[{RATE}]))", "duplicate results"),
                ],
                "ops",
            ),
        ],
    ]
    return dashboard(
        "shoal-cluster",
        "shoal / cluster overview",
        "Requests, errors, latency, queue and workers of a shoal cluster.",
        rows,
        "shoal_requests_total",
    )


def models() -> dict[str, Any]:
    waste = (
        f"1 - sum by (model) (rate(shoal_tokens_total{{{M}}}[{RATE}]))"
        f" / sum by (model) (rate(shoal_batch_computed_tokens_total{{{M}}}[{RATE}]))"
    )
    fill = (
        f"sum by (model) (rate(shoal_batch_fill_ratio_sum{{{M}}}[{RATE}]))"
        f" / sum by (model) (rate(shoal_batch_fill_ratio_count{{{M}}}[{RATE}]))"
    )
    rows = [
        [
            panel(
                "Tokens/s by model",
                [(f"sum by (model) (rate(shoal_tokens_total{{{M}}}[{RATE}]))", "{{model}}")],
                "short",
                stack=True,
            ),
            panel(
                "Items/s by model and task",
                [(f"sum by (model, task) (rate(shoal_items_total{{{M}}}[{RATE}]))", "{{model}} {{task}}")],
                "short",
            ),
        ],
        [
            panel(
                "Batch fill (real tokens / token budget)",
                [(fill, "{{model}}")],
                "percentunit",
                description="Mean share of the token budget a forward batch uses.",
            ),
            panel(
                "Padding waste",
                [(waste, "{{model}}")],
                "percentunit",
                description="Share of computed token positions that are padding (0 while batches are packed).",
            ),
        ],
        [
            panel("Tokens per batch", quantiles("shoal_batch_tokens", "", M), "short"),
            panel(
                "Tasks per pull",
                [
                    (f"histogram_quantile(0.5, sum by (le) (rate(shoal_queue_pull_batch_size_bucket[{RATE}])))", "p50"),
                    (
                        f"histogram_quantile(0.95, sum by (le) (rate(shoal_queue_pull_batch_size_bucket[{RATE}])))",
                        "p95",
                    ),
                ],
                "short",
            ),
        ],
        [
            panel(
                "Model loads",
                [
                    (
                        f"sum by (model, outcome) (increase(shoal_model_loads_total{{{M}}}[{RATE}]))",
                        "{{model}} {{outcome}}",
                    )
                ],
                "short",
            ),
            panel(
                "Evictions",
                [
                    (
                        f"sum by (model, from_tier, to_tier) (increase(shoal_evictions_total{{{M}}}[{RATE}]))",
                        "{{model}} {{from_tier}}→{{to_tier}}",
                    )
                ],
                "short",
            ),
        ],
        [
            panel(
                "Load time p95 by source",
                [
                    (
                        f"histogram_quantile(0.95, sum by (le, source) (rate(shoal_model_load_seconds_bucket[{RATE}])))",
                        "{{source}}",
                    )
                ],
                "s",
            ),
            panel(
                "Out-of-memory recoveries",
                [(f"sum by (action) (increase(shoal_oom_recoveries_total[{RATE}]))", "{{action}}")],
                "short",
            ),
            panel(
                "LoRA adapter cache", [(f"sum by (result) (rate(shoal_lora_cache_total[{RATE}]))", "{{result}}")], "ops"
            ),
        ],
    ]
    return dashboard(
        "shoal-models",
        "shoal / model performance",
        "Throughput, batch fill, padding waste, loads and evictions per model.",
        rows,
        "shoal_tokens_total",
    )


def residency() -> dict[str, Any]:
    rows = [
        [
            panel("Bytes per tier (cluster)", [("sum by (tier) (shoal_tier_bytes)", "{{tier}}")], "bytes", stack=True),
            panel(
                "Resident models per tier (cluster)",
                [("sum by (tier) (shoal_resident_models)", "{{tier}}")],
                "short",
                stack=True,
            ),
        ],
        [
            panel(
                "Device bytes by worker",
                [('sum by (instance) (shoal_tier_bytes{tier="device"})', "{{instance}}")],
                "bytes",
            ),
            panel(
                "Host RAM bytes by worker",
                [('sum by (instance) (shoal_tier_bytes{tier="host"})', "{{instance}}")],
                "bytes",
            ),
        ],
        [
            panel(
                "Moves between tiers",
                [
                    (
                        f"sum by (from_tier, to_tier) (rate(shoal_evictions_total{{{M}}}[{RATE}]))",
                        "{{from_tier}}→{{to_tier}}",
                    )
                ],
                "ops",
            ),
            panel(
                "Load time by source",
                quantiles("shoal_model_load_seconds", ", source"),
                "s",
                description="host: a swap-in from host RAM; disk: a cold load.",
            ),
        ],
    ]
    return dashboard(
        "shoal-residency",
        "shoal / residency",
        "Where models live: bytes and models per tier (device, host RAM, disk), moves between tiers.",
        rows,
        "shoal_evictions_total",
    )


DASHBOARDS = {"shoal-cluster.json": cluster, "shoal-models.json": models, "shoal-residency.json": residency}


def render() -> dict[str, str]:
    return {name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n" for name, build in DASHBOARDS.items()}


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text, encoding="utf-8")
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
