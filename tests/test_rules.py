"""The PrometheusRule in deploy/monitoring: promtool-clean, every rule unit-tested, names in the table.

The rule groups are the PrometheusRule's ``spec``; a plain Prometheus loads the same groups as
a rule file. The tests write that file next to copies of deploy/monitoring/tests/*.test.yaml and
run ``promtool check rules`` and ``promtool test rules`` on them, as a user would by hand.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from metric_names import known_names, names_in
from servers import ROOT, prometheus_build

pytestmark = pytest.mark.usefixtures("prometheus_version")  # promtool check/test rules of 2.42 and 3.5

MONITORING = ROOT / "deploy" / "monitoring"
RULE_FILE = "rightsizer.rules.yaml"


def rule_groups() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert doc["kind"] == "PrometheusRule"
    return list(doc["spec"]["groups"])


def all_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def unit_test_files() -> list[Path]:
    return sorted((MONITORING / "tests").glob("*.test.yaml"))


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([prometheus_build().promtool, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def stage(tmp_path: Path, groups: list[dict[str, Any]], tests: list[Path]) -> list[str]:
    (tmp_path / RULE_FILE).write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    for test in tests:
        shutil.copy(test, tmp_path / test.name)
    return [t.name for t in tests]


def test_rule_groups_pass_promtool_check_rules(tmp_path: Path) -> None:
    stage(tmp_path, rule_groups(), [])
    result = promtool("check", "rules", RULE_FILE, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(all_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    names = stage(tmp_path, rule_groups(), unit_test_files())
    assert names, "no unit tests in deploy/monitoring/tests"
    result = promtool("test", "rules", *names, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(names)


def test_unit_tests_catch_a_broken_rule(tmp_path: Path) -> None:
    """The unit tests constrain the rules: an idle alert that waits too little fails them."""
    groups = rule_groups()
    for rule in (r for g in groups for r in g["rules"]):
        if rule.get("alert") == "RightsizerGpuIdle":
            rule["for"] = "10m"
    names = stage(tmp_path, groups, unit_test_files())
    result = promtool("test", "rules", *names, cwd=tmp_path)
    assert result.returncode != 0
    assert "RightsizerGpuIdle" in result.stdout + result.stderr


def test_every_rule_has_a_unit_test() -> None:
    tested_alerts: set[str] = set()
    tested_exprs: list[str] = []
    for path in unit_test_files():
        for case in yaml.safe_load(path.read_text())["tests"]:
            tested_alerts |= {t["alertname"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
            tested_exprs += [t["expr"] for t in case.get("promql_expr_test", []) if t.get("exp_samples")]
    for rule in all_rules():
        if "alert" in rule:
            assert rule["alert"] in tested_alerts, f"{rule['alert']} is never seen firing in a unit test"
        else:
            assert any(rule["record"] in expr for expr in tested_exprs), f"{rule['record']} has no unit test"


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.get("alert") or r.get("record"))
def test_rules_use_only_published_metric_names(rule: dict[str, Any]) -> None:
    name = rule.get("alert") or rule.get("record")
    used = names_in(rule["expr"])
    recorded = [r["record"] for r in all_rules() if "record" in r and r["record"] in rule["expr"]]
    assert used or recorded or 'up{job="rightsizer-' in rule["expr"], f"{name} selects none of our series"
    unknown = used - known_names()
    assert not unknown, f"{name}: not in the metric table: {unknown}"


def test_alerts_carry_severity_and_text() -> None:
    for rule in all_rules():
        if "alert" in rule:
            assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


@pytest.mark.parametrize("record", [
    "namespace_workload_pod:rightsizer_gpu_info:relabel",
    "namespace_workload:rightsizer_gpu_activity_p95_ratio:max",
    "namespace_workload:rightsizer_gpu_memory_peak_bytes:max",
    "namespace_workload:rightsizer_gpu_hourly_savings_dollars:sum",
])
def test_workload_label_matches_the_adapters(tmp_path: Path, record: str) -> None:
    """Dashboards and HPA must agree on what a workload is: the recording rules derive it from
    the pod name exactly as ``rightsizer_core.workloads.workload_of`` does, checked through promtool."""
    from rightsizer_core.workloads import workload_of

    pods = ["chat-7d9f8b6c4-x2k9q", "chat-7d9f8b6c4-m5wzt", "vllm-llama-3-8b-5c8d7f9b4d-2xq7z", "trainer-0",
            "db-12", "embed-x2k9q", "node-probe-b7vzc", "notebook", "my-model", "a-b-c", "gpu-burn-7"]
    source = record.split(":")[1]
    series = [{"series": f'{family}{{UUID="GPU-{i}",namespace="ns",pod="{pod}"}}', "values": "1x5"}
              for family in {source, "rightsizer_gpu_info"} for i, pod in enumerate(pods)]
    if record.endswith(":relabel"):
        samples = [{"labels": f'{record}{{namespace="ns",workload="{workload_of(p)}",pod="{p}"}}', "value": 1}
                   for p in pods]
    else:
        expected: dict[str, int] = {}
        for pod in pods:
            expected[workload_of(pod)] = expected.get(workload_of(pod), 0) + 1
        summed = record.endswith(":sum")
        samples = [{"labels": f'{record}{{namespace="ns",workload="{w}"}}', "value": n if summed else 1}
                   for w, n in expected.items()]
    case = {"rule_files": [RULE_FILE], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": record, "eval_time": "2m", "exp_samples": samples}]}]}
    stage(tmp_path, rule_groups(), [])
    (tmp_path / "workload.test.yaml").write_text(yaml.safe_dump(case, sort_keys=False))
    result = promtool("test", "rules", "workload.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
