"""checkov finds nothing in the rendered chart, the Terraform and the Dockerfiles; every suppression says why."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.deploy_support import DEPLOY, gpu_values, need_tool, render_chart

pytestmark = pytest.mark.slow


def checkov(target: str, framework: str) -> dict:
    binary = need_tool("checkov", "pip install checkov into .venv-tools (its pins clash with the main venv)")
    proc = subprocess.run([binary, "-d", target, "--framework", framework, "--output", "json",
                           "--skip-download", "--compact"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    reports = report if isinstance(report, list) else [report]
    (found,) = [r for r in reports if r.get("check_type") == framework]
    return found


def failures(report: dict) -> list[str]:
    return [f"{c['check_id']} {c['resource']} {c['file_path']}" for c in report["results"]["failed_checks"]]


def skips_have_reasons(report: dict) -> None:
    for c in report["results"]["skipped_checks"]:
        reason = c.get("check_result", {}).get("suppress_comment", "")
        assert len(reason) > 20, f"{c['check_id']} on {c['resource']} is suppressed without a reason"


def test_rendered_chart_has_no_findings(tmp_path):
    for tag, values in (("defaults", {}), ("gpu", gpu_values())):
        for path, text in render_chart(values).items():
            if path.endswith(".yaml") and text.strip():
                (tmp_path / tag).mkdir(exist_ok=True)
                (tmp_path / tag / path.split("/")[-1]).write_text(text)
    report = checkov(str(tmp_path), "kubernetes")
    assert report["summary"]["passed"] > 100
    assert not failures(report), failures(report)
    skips_have_reasons(report)


def test_terraform_has_no_findings():
    report = checkov(str(DEPLOY / "terraform"), "terraform")
    assert report["summary"]["passed"] > 20
    assert not failures(report), failures(report)
    skips_have_reasons(report)


def test_dockerfiles_have_no_findings():
    report = checkov(str(DEPLOY / "docker"), "dockerfile")
    assert report["summary"]["passed"] > 50
    assert not failures(report), failures(report)
    skips_have_reasons(report)


def test_chart_suppressions_are_written_down():
    """Inline chart suppressions (checkov.io/skipN annotations) each carry a reason after '='."""
    text = "\n".join(p.read_text() for p in (DEPLOY / "helm" / "shoal" / "templates").glob("*"))
    skips = re.findall(r"checkov\.io/skip\d+: (CKV\w+)=(.*)", text)
    assert skips and all(len(reason) > 20 for _, reason in skips), skips
