"""deploy/prometheus: promtool checks and unit-tests the rules (also as the chart renders them), and a real
Prometheus (Debian's package) scrapes a running `shoal serve` and answers a query for its request counter."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest
import yaml

from tests.deploy_support import DEPLOY, RULE_FILES, gpu_values, manifests, need_tool, of_kind, render_chart
from tests.helpers import LiveServer, free_port, stop_process

PROMTOOL_HOW = "Debian package prometheus: apt-get install prometheus"


def promtool() -> str:
    return need_tool("promtool", PROMTOOL_HOW)


def test_rule_files_pass_promtool_check():
    proc = subprocess.run([promtool(), "check", "rules", *map(str, RULE_FILES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(RULE_FILES)


def test_alerts_fire_on_the_cases_they_are_for():
    """promtool's rule unit tests: each alert fires on synthetic series of its failure and stays quiet otherwise."""
    tests = DEPLOY / "prometheus" / "tests" / "shoal.alerts.test.yml"
    proc = subprocess.run([promtool(), "test", "rules", str(tests)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    alerts = {r["alert"] for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"]
              if "alert" in r}  # fmt: skip
    tested = {
        t["alertname"] for case in yaml.safe_load(tests.read_text())["tests"] for t in case.get("alert_rule_test", [])
    }
    assert alerts == tested, f"alerts without a unit test: {alerts - tested}"
    for required in ("ShoalQueueBacklogGrowing", "ShoalDeadLetters", "ShoalHighErrorRate", "ShoalModelThrash",
                     "ShoalNoWorkers"):  # fmt: skip
        assert required in alerts


def test_chart_prometheus_rule_passes_promtool(tmp_path):
    (rule,) = of_kind(manifests(render_chart(gpu_values())), "PrometheusRule")
    groups = rule["spec"]["groups"]
    path = tmp_path / "rendered.yml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    proc = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pools = [r for g in groups if g["name"] == "shoal.pools" for r in g["rules"]]
    assert sorted(r["labels"]["pool"] for r in pools) == sorted(p["name"] for p in gpu_values()["workerPools"])
    static = {g["name"] for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]}
    assert static <= {g["name"] for g in groups}


def test_pool_alert_fires_only_for_its_own_models(tmp_path):
    """The chart's per-pool alert, unit-tested by promtool on the rules as rendered."""
    (rule,) = of_kind(manifests(render_chart(gpu_values())), "PrometheusRule")
    pools = [g for g in rule["spec"]["groups"] if g["name"] == "shoal.pools"]
    (tmp_path / "pools.yml").write_text(yaml.safe_dump({"groups": pools}))
    case = {
        "rule_files": ["pools.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'shoal_queue_model_pending{model="naver/splade-v3"}', "values": "3x20"},
                {"series": 'shoal_worker_up{pool="gpu-ondemand",instance="a"}', "values": "1x20"},
            ],
            "alert_rule_test": [{
                "eval_time": "15m",
                "alertname": "ShoalPoolNoWorkers",
                "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "pool": "gpu-spot"},
                    "exp_annotations": next(r["annotations"] for r in pools[0]["rules"] if r["labels"]["pool"] == "gpu-spot"),
                }],
            }],
        }],
    }  # fmt: skip
    (tmp_path / "test.yml").write_text(yaml.safe_dump(case))
    proc = subprocess.run([promtool(), "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


class Prometheus:
    """Debian's prometheus on a free loopback port with a temp TSDB; stopped by PID."""

    def __init__(self, config: str, folder) -> None:
        binary = need_tool("prometheus", PROMTOOL_HOW)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (folder / "prometheus.yml").write_text(config)
        cmd = [binary, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'tsdb'}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def query(self, promql: str) -> list[dict]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def wait_for(self, promql: str, timeout: float = 60) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited with {self.proc.returncode}"
            try:
                result = self.query(promql)
                if result:
                    return result
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"prometheus never answered {promql!r} with a value")

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.mark.slow
def test_real_prometheus_scrapes_shoal_serve(tmp_path):
    server = LiveServer().wait_ready()
    prometheus = None
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for i in range(3):
                r = client.post("/v1/encode/sentence-transformers/all-MiniLM-L6-v2",
                                json={"items": [{"text": f"hello {i}"}]}, headers={"Accept": "application/json"})  # fmt: skip
                assert r.status_code == 200, r.text
        rules = "\n".join(f"  - {p}" for p in RULE_FILES)
        config = (f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n{rules}\n"
                  f"scrape_configs:\n  - job_name: shoal-gateway\n    static_configs:\n"
                  f"      - targets: ['127.0.0.1:{server.port}']\n")  # fmt: skip
        prometheus = Prometheus(config, tmp_path)
        result = prometheus.wait_for('shoal_requests_total{endpoint="encode",code="200"}')
        (sample,) = result
        assert sample["metric"]["model"] == "sentence-transformers/all-MiniLM-L6-v2"
        assert sample["metric"]["job"] == "shoal-gateway"
        assert float(sample["value"][1]) == 3.0
        (up,) = prometheus.query('up{job="shoal-gateway"}')
        assert up["value"][1] == "1"
        rules = httpx.get(f"{prometheus.url}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert {g["name"] for g in rules} == {"shoal.recording", "shoal.alerts"}
        assert all(r["health"] != "err" for g in rules for r in g["rules"]), rules
    finally:
        if prometheus:
            prometheus.stop()
        server.stop()
