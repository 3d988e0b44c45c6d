"""deploy/ YAML passes yamllint (deploy/.yamllint.yml) and the Grafana dashboards are well-formed and current."""

from __future__ import annotations

import importlib.util
import json
import subprocess

import yaml

from tests.deploy_support import DASHBOARDS, DEPLOY, gpu_values, need_tool, render_chart


def test_yamllint_passes_on_every_yaml_file():
    yamllint = need_tool("yamllint", "pip install yamllint")
    listed = subprocess.run(
        [yamllint, "-c", ".yamllint.yml", "--list-files", "."], cwd=DEPLOY, capture_output=True, text=True
    )
    files = listed.stdout.split()
    assert len(files) >= 10 and "./docker/docker-compose.yml" in files and "./helm/shoal/values.yaml" in files
    proc = subprocess.run([yamllint, "-c", ".yamllint.yml", "-f", "parsable", "--strict", "."], cwd=DEPLOY,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_yamllint_passes_on_the_rendered_chart(tmp_path):
    """Templates are Go templates (yamllint skips them); what they render must lint too (syntax, keys)."""
    yamllint = need_tool("yamllint", "pip install yamllint")
    config = {"extends": "relaxed", "rules": {"line-length": "disable", "trailing-spaces": "disable",
                                             "empty-lines": "disable", "key-duplicates": "enable"}}  # fmt: skip
    (tmp_path / "lint.yml").write_text(yaml.safe_dump(config))
    for path, text in render_chart(gpu_values()).items():
        if path.endswith(".yaml") and text.strip():
            (tmp_path / path.split("/")[-1]).write_text(text)
    proc = subprocess.run([yamllint, "-c", str(tmp_path / "lint.yml"), "-f", "parsable", str(tmp_path)],
                          capture_output=True, text=True)  # fmt: skip
    errors = [line for line in proc.stdout.splitlines() if "[error]" in line]
    assert not errors, errors


def test_dashboards_are_grafana_json_models():
    assert {p.name for p in DASHBOARDS} == {"shoal-cluster.json", "shoal-models.json", "shoal-residency.json"}
    uids = set()
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        assert board["schemaVersion"] >= 36 and board["title"].startswith("shoal / ")
        uids.add(board["uid"])
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))
        for p in board["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24 and g["h"] > 0
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"])
        assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "model"]
    assert len(uids) == 3


def test_dashboards_are_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("build_dashboards", DEPLOY / "grafana" / "build_dashboards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, text in module.render().items():
        assert (DEPLOY / "grafana" / "dashboards" / name).read_text() == text, (
            f"{name} is stale: python deploy/grafana/build_dashboards.py && deploy/helm/sync-files.sh"
        )


def test_dashboards_show_what_the_issue_asks_for():
    text = {p.stem: p.read_text() for p in DASHBOARDS}
    for metric in ("shoal_requests_total", "shoal_request_seconds_bucket", "shoal_queue_pending", "shoal_worker_up"):
        assert metric in text["shoal-cluster"], metric
    for metric in ("shoal_tokens_total", "shoal_batch_fill_ratio", "shoal_batch_computed_tokens_total",
                   "shoal_model_loads_total", "shoal_evictions_total"):  # fmt: skip
        assert metric in text["shoal-models"], metric
    assert "shoal_tier_bytes" in text["shoal-residency"]
