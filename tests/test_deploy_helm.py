"""The Helm chart (deploy/helm/shoal): templates parse, the chart renders and lints with Helm's own engine,
worker pools, KEDA ScaledObjects, the catalogue ConfigMap and the failure messages for bad values."""

from __future__ import annotations

import copy
import filecmp
import re

import pytest
import yaml

from engine.catalogue.cards import ModelCard
from engine.queue.nats.subjects import subject_token
from tests.deploy_support import CHART, DEPLOY, gpu_values, manifests, of_kind, render_chart

KEDA_TRIGGER_KEYS = {"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold",
                     "activationLagThreshold"}  # fmt: skip


def stub_go_templates(text: str) -> str:
    """Drop lines that are only template actions; replace inline actions with a placeholder scalar."""
    lines = []
    for line in text.splitlines():
        if re.fullmatch(r"\s*(\{\{.*?\}\}\s*)+", line):
            continue
        lines.append(re.sub(r"\{\{.*?\}\}", "stub", line))
    return "\n".join(lines)


@pytest.mark.parametrize("template", sorted((CHART / "templates").glob("*.yaml")), ids=lambda p: p.name)
def test_every_template_is_yaml_once_go_templates_are_stubbed(template):
    docs = [d for d in yaml.safe_load_all(stub_go_templates(template.read_text())) if d]
    assert docs, f"{template.name} holds no YAML object"
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), f"{template.name}: {sorted(doc)}"


@pytest.mark.parametrize("values", [{}, "gpu"], ids=["defaults", "gpu-values"])
def test_chart_renders_to_named_namespaced_objects(values):
    docs = manifests(render_chart(gpu_values() if values == "gpu" else values))
    keys = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys)), "two objects share a kind and a name"
    for d in docs:
        assert d["metadata"]["namespace"] == "shoal-test", d["metadata"]
        assert len(d["metadata"]["name"]) <= 63
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "StatefulSet", "ScaledObject", "NetworkPolicy", "ServiceAccount"} <= kinds
    if values == "gpu":
        assert {"ServiceMonitor", "PrometheusRule", "Ingress", "CronJob", "Secret", "ConfigMap"} <= kinds


def test_chart_lints_clean():
    helm = pytest.importorskip("helm_python")
    for values in ({}, gpu_values()):
        report = helm.lint(str(CHART), values, strict=True)
        assert not report["errors"], report
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report["messages"]


def test_one_scaled_object_per_pool_on_its_models_consumers():
    values = gpu_values()
    docs = manifests(render_chart(values))
    scaled = {d["metadata"]["labels"]["shoal.dev/pool"]: d for d in of_kind(docs, "ScaledObject")}
    assert sorted(scaled) == sorted(p["name"] for p in values["workerPools"])
    deployments = {d["metadata"]["name"]: d for d in of_kind(docs, "Deployment")}
    for pool in values["workerPools"]:
        so = scaled[pool["name"]]["spec"]
        assert so["minReplicaCount"] == pool["minReplicas"] and so["maxReplicaCount"] == pool["maxReplicas"]
        target = deployments[so["scaleTargetRef"]["name"]]
        assert "replicas" not in target["spec"], "KEDA owns the replica count; Helm must not reset it"
        triggers = so["triggers"]
        assert [t["type"] for t in triggers] == ["nats-jetstream"] * len(pool["models"])
        for trigger, model in zip(triggers, pool["models"], strict=True):
            meta = trigger["metadata"]
            assert set(meta) == KEDA_TRIGGER_KEYS
            assert meta["consumer"] == f"work-{subject_token(model)}"  # the name engine/queue/nats/subjects.py gives it
            assert meta["stream"] == "SHOAL_WORK" and meta["account"] == "$G"
            assert meta["natsServerMonitoringEndpoint"] == "rel-shoal-nats.shoal-test.svc.cluster.local:8222"
            assert all(isinstance(v, str) for v in meta.values()), "KEDA metadata values are strings"
    assert scaled["gpu-spot"]["spec"]["minReplicaCount"] == 0  # scale to zero


def test_consumer_names_match_the_engine_for_awkward_model_ids():
    models = ["BAAI/bge-small-en-v1.5", "a" * 80 + "/x.y", "///", "Ünïcode/模型-v2", "_lead_and_trail_"]
    values = {"workerPools": [{"name": "p", "models": models, "minReplicas": 0, "maxReplicas": 1}]}
    (so,) = of_kind(manifests(render_chart(values)), "ScaledObject")
    got = [t["metadata"]["consumer"] for t in so["spec"]["triggers"]]
    assert got == [f"work-{subject_token(m)}" for m in models]


def test_worker_pools_place_pods_and_claim_gpus():
    values = gpu_values()
    docs = manifests(render_chart(values))
    for pool in values["workerPools"]:
        (dep,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == f"rel-shoal-worker-{pool['name']}"]
        spec = dep["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        assert spec.get("nodeSelector", {}) == pool.get("nodeSelector", {})
        assert spec.get("tolerations", []) == pool.get("tolerations", [])
        args = c["args"]
        assert args[:3] == ["worker", "--metrics-port", "9101"]
        allowed = [args[i + 1] for i, a in enumerate(args) if a == "--models"]
        assert allowed == pool["models"]
        gpus = pool.get("gpu", {}).get("count", 0)
        assert c["resources"]["limits"].get("nvidia.com/gpu", 0) == gpus
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["SHOAL_DEVICE"] == pool.get("device", "cpu")
        assert env["SHOAL_QUEUE_URL"] == "nats://rel-shoal-nats.shoal-test.svc:4222"
        assert c["image"].endswith(pool.get("image", {}).get("tag", "0.1.0-cpu"))
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert {p["name"] for p in c["ports"]} == {"metrics"}
        assert c["startupProbe"]["httpGet"]["port"] == "metrics"


def test_catalogue_configmap_holds_valid_cards_and_rolls_the_pods():
    values = gpu_values()
    docs = manifests(render_chart(values))
    (cm,) = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == "rel-shoal-models"]
    assert sorted(cm["data"]) == sorted(values["models"])
    for text in cm["data"].values():
        ModelCard.model_validate(yaml.safe_load(text))  # the engine's own card schema
    gateway = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "rel-shoal-gateway"][0]
    (c,) = gateway["spec"]["template"]["spec"]["containers"]
    assert {"name": "SHOAL_MODEL_DIR", "value": "/etc/shoal/models"} in c["env"]
    assert {"name": "catalogue", "mountPath": "/etc/shoal/models", "readOnly": True} in c["volumeMounts"]
    # deploying a model is a values change that rolls the pods (the checksum annotation changes)
    changed = copy.deepcopy(values)
    changed["models"]["bge-small-en-v1.5.yaml"]["max_seq_len"] = 256
    again = [
        d
        for d in of_kind(manifests(render_chart(changed)), "Deployment")
        if d["metadata"]["name"] == "rel-shoal-gateway"
    ]
    key = "checksum/models"
    assert (
        again[0]["spec"]["template"]["metadata"]["annotations"][key]
        != gateway["spec"]["template"]["metadata"]["annotations"][key]
    )


def test_gateway_reads_every_key_from_the_mounted_secret():
    docs = manifests(render_chart(gpu_values()))
    (secret,) = of_kind(docs, "Secret")
    assert secret["stringData"]["api-keys"].split() == ["ci-key-one", "ci-key-two"]
    gateway = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "rel-shoal-gateway"][0]
    (c,) = gateway["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["SHOAL_API_KEYS_FILE"] == "/etc/shoal/auth/api-keys" and "SHOAL_API_KEY" not in env
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "auth"]
    assert mount["mountPath"] == "/etc/shoal/auth" and mount["readOnly"]
    (volume,) = [v for v in gateway["spec"]["template"]["spec"]["volumes"] if v["name"] == "auth"]
    assert volume["secret"]["items"] == [{"key": "api-keys", "path": "api-keys"}]
    assert env["SHOAL_METRICS_PORT"] == "9100" and {p["name"] for p in c["ports"]} == {"http", "metrics"}
    default = [
        d for d in of_kind(manifests(render_chart({})), "Deployment") if d["metadata"]["name"] == "rel-shoal-gateway"
    ]
    names = {e["name"] for e in default[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "SHOAL_API_KEYS_FILE" not in names and "SHOAL_API_KEY" not in names  # auth off by default


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"workerPools": [{"name": "p", "models": ["m"], "minReplicas": 3, "maxReplicas": 1}]}, "over maxReplicas"),
        ({"workerPools": [{"name": "p", "models": [], "minReplicas": 0, "maxReplicas": 1}]}, "model allow-list"),
        ({"workerPools": [{"name": "Bad_Name", "models": ["m"], "minReplicas": 0, "maxReplicas": 1}]}, "DNS label"),
        ({"auth": {"enabled": True, "apiKeys": []}}, "needs auth.apiKeys"),
        ({"reindex": {"enabled": True}}, "existingClaim"),
        ({"models": {"card.yml": {"id": "x"}}}, "must end in .yaml"),
        ({"nats": {"enabled": False}}, "nats.externalUrl is required"),
        (
            {"reindex": {"enabled": True, "db": "qdrant+edge:///data/s", "existingClaim": "c", "shards": 4}},
            "one process",
        ),
        ({"reindex": {"enabled": True, "existingClaim": "c", "shards": 0}}, "shards must be at least 1"),
    ],
    ids=[
        "min-over-max",
        "no-models",
        "pool-name",
        "auth-no-keys",
        "reindex-no-claim",
        "card-name",
        "no-nats",
        "edge-shards",
        "zero-shards",
    ],  # fmt: skip
)
def test_bad_values_fail_with_a_message(change, message):
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render_chart(change)


def test_sharded_reindex_is_an_indexed_job_with_parallelism():
    values = {"reindex": {"enabled": True, "existingClaim": "data", "shards": 4, "parallelism": 2}}
    (cron,) = of_kind(manifests(render_chart(values)), "CronJob")
    job = cron["spec"]["jobTemplate"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 4, 2)
    (c,) = job["template"]["spec"]["containers"]
    assert {"name": "SHOAL_SHARD_COUNT", "value": "4"} in c["env"] and c["args"][0] == "reindex"
    (plain,) = of_kind(manifests(render_chart({"reindex": {"enabled": True, "existingClaim": "data"}})), "CronJob")
    assert "completionMode" not in plain["spec"]["jobTemplate"]["spec"]
    env = plain["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert all(e["name"] != "SHOAL_SHARD_COUNT" for e in env)


def test_service_monitor_scrapes_gateway_and_workers_with_pool_label():
    docs = manifests(render_chart(gpu_values()))
    (sm,) = of_kind(docs, "ServiceMonitor")
    ports = {e["port"] for e in sm["spec"]["endpoints"]}
    services = {d["metadata"]["name"]: d for d in of_kind(docs, "Service")}
    assert ports == {"metrics"}  # never the API port, which may need a key
    assert {p["name"] for p in services["rel-shoal-gateway"]["spec"]["ports"]} & ports == {"metrics"}
    assert {p["name"] for p in services["rel-shoal-workers"]["spec"]["ports"]} & ports == {"metrics"}
    selector = sm["spec"]["selector"]["matchLabels"]
    for name in ("rel-shoal-gateway", "rel-shoal-workers"):
        assert selector.items() <= services[name]["metadata"]["labels"].items()
    worker_endpoint = [e for e in sm["spec"]["endpoints"] if e["port"] == "metrics"][0]
    # auth is on in these values: the gateway's metrics port needs a key, sent from the auth Secret
    assert worker_endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "rel-shoal-auth", "key": "api-key"},
    }
    (plain,) = of_kind(manifests(render_chart({"metrics": {"serviceMonitor": {"enabled": True}}})), "ServiceMonitor")
    assert "authorization" not in plain["spec"]["endpoints"][0]  # auth off: nothing to send
    assert {"sourceLabels": ["__meta_kubernetes_pod_label_shoal_dev_pool"], "targetLabel": "pool"} in worker_endpoint[
        "relabelings"
    ]


def test_chart_copies_of_rules_and_dashboards_are_in_sync():
    pairs = [(p, CHART / "files" / "rules" / p.name) for p in (DEPLOY / "prometheus" / "rules").glob("*.yml")]
    pairs += [(p, CHART / "files" / "dashboards" / p.name) for p in (DEPLOY / "grafana" / "dashboards").glob("*.json")]
    stale = [str(copy_) for src, copy_ in pairs if not copy_.exists() or not filecmp.cmp(src, copy_, shallow=False)]
    assert not stale, f"run deploy/helm/sync-files.sh: {stale}"


def test_nats_replicas_3_renders_a_three_node_cluster_and_a_replicated_stream():
    docs = manifests(render_chart({"nats": {"replicas": 3}}))
    sts = next(d for d in of_kind(docs, "StatefulSet") if d["metadata"]["name"].endswith("-nats"))
    assert sts["spec"]["replicas"] == 3
    conf = next(d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-nats"))["data"]["nats.conf"]
    assert "server_name: $POD_NAME" in conf and conf.count(".svc:6222") == 3  # a route to each node
    envs = [{e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
            for d in of_kind(docs, "Deployment")]  # fmt: skip
    assert envs and all(e["SHOAL_QUEUE_REPLICAS"] == "3" for e in envs)
    single = manifests(render_chart({}))
    conf1 = next(d for d in of_kind(single, "ConfigMap") if d["metadata"]["name"].endswith("-nats"))["data"][
        "nats.conf"
    ]
    assert "cluster" not in conf1
