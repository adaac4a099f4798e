"""The ``queues:`` section: every wrong entry stops the exporter with exit 2 and one line naming it,
under ``--check-config`` and on a real start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from servers import ROOT

GOOD = [
    {"name": "jobs", "kind": "redis", "url": "redis://127.0.0.1:6379/0", "key": "jobs"},
    {
        "name": "chat",
        "kind": "vllm",
        "url": "http://chat-vllm:8000/metrics",
        "labels": {"namespace": "prod", "workload": "chat"},
    },
]


def run(tmp_path: Path, queues: object, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump({"queues": queues}))
    return subprocess.run(
        [sys.executable, "-m", "exporter", "--config", str(path), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_the_issue_example_is_valid(tmp_path: Path) -> None:
    result = run(tmp_path, GOOD, "--check-config")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(": OK")


BAD = {
    "unknown kind": (
        [{"name": "a", "kind": "kafka", "url": "http://x/metrics"}],
        "queues[0]: queue 'a': unknown kind 'kafka' (kinds: vllm, tgi, triton, sglang, prometheus, redis, "
        "http_json)",
    ),
    "redis without key": (
        [GOOD[1], {"name": "jobs", "kind": "redis", "url": "redis://127.0.0.1:6379/0"}],
        "queues[1]: queue 'jobs': kind redis needs 'key'",
    ),
    "prometheus without metric": (
        [{"name": "p", "kind": "prometheus", "url": "http://x/metrics"}],
        "queues[0]: queue 'p': kind prometheus needs 'metric'",
    ),
    "http_json without path": (
        [{"name": "j", "kind": "http_json", "url": "http://x/status"}],
        "queues[0]: queue 'j': kind http_json needs 'path'",
    ),
    "duplicate name": (
        [*GOOD, {"name": "jobs", "kind": "tgi", "url": "http://tgi/metrics"}],
        "queues[2]: duplicate queue name 'jobs' (also queues[0])",
    ),
    "no name": (
        [{"kind": "tgi", "url": "http://tgi/metrics"}],
        "queues[0]: queue (no name): 'name' is required",
    ),
    "no url": ([{"name": "t", "kind": "tgi"}], "queues[0]: queue 't': 'url' is required"),
    "wrong scheme": (
        [{"name": "r", "kind": "redis", "url": "http://redis:6379", "key": "k"}],
        "queues[0]: queue 'r': url must start with redis:// or rediss:// or unix://; got 'http://redis:6379'",
    ),
    "key for another kind": (
        [{"name": "t", "kind": "tgi", "url": "http://tgi/metrics", "key": "k"}],
        "queues[0]: queue 't': 'key' does not apply to kind tgi",
    ),
    "reserved label": (
        [{**GOOD[1], "labels": {"queue": "x"}}],
        "queues[0]: queue 'chat': label 'queue' is set by the exporter itself",
    ),
    "bad label name": (
        [{**GOOD[1], "labels": {"team-name": "x"}}],
        "queues[0]: queue 'chat': 'team-name' is not a valid label name",
    ),
    "unreadable token file": (
        [{**GOOD[1], "bearer_token_file": "/nonexistent/token"}],
        "queues[0]: queue 'chat': bearer_token_file '/nonexistent/token' cannot be read",
    ),
    "header injection": (
        [{**GOOD[1], "headers": {"X-Tenant": "a\r\nX-Admin: yes"}}],
        "queues[0]: queue 'chat': header X-Tenant has a line break in its value",
    ),
    "header outside latin-1": (
        [{**GOOD[1], "headers": {"X-Tenant": "équipe-東京"}}],
        "queues[0]: queue 'chat': header X-Tenant has a control character or a character outside Latin-1",
    ),
    "max_series on redis": (
        [{**GOOD[0], "max_series": 10}],
        "queues[0]: queue 'jobs': 'max_series' does not apply to kind redis",
    ),
    "max_groups without a group": (
        [{**GOOD[0], "max_groups": 10}],
        "queues[0]: queue 'jobs': 'max_groups' applies only with 'group'",
    ),
    "host header": (
        [{**GOOD[1], "headers": {"Host": "x"}}],
        "queues[0]: queue 'chat': 'Host' cannot be set in headers",
    ),
    "credentials in url": (
        [{**GOOD[1], "url": "http://u:p@chat-vllm:8000/metrics"}],
        "queues[0]: queue 'chat': put credentials in basic_auth, not in the url",
    ),
    "unknown key": ([{**GOOD[0], "kee": "jobs"}], "queues[0]: unknown key 'kee' (known keys: backoff_max,"),
    "interval out of range": (
        [{**GOOD[0], "interval": 0}],
        "queues[0].interval: must be at least 0.05; got 0",
    ),
    "not a list": ({"name": "jobs"}, "queues: must be a list"),
}


def check_one_line(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rightsizer-exporter: ")
    assert message in lines[0]


@pytest.mark.parametrize("case", sorted(BAD))
def test_check_config_exits_2_with_one_line_naming_the_entry(tmp_path: Path, case: str) -> None:
    queues, message = BAD[case]
    check_one_line(run(tmp_path, queues, "--check-config"), message)


@pytest.mark.parametrize("case", ["unknown kind", "redis without key", "duplicate name"])
def test_a_real_start_refuses_the_same_entries(tmp_path: Path, case: str) -> None:
    queues, message = BAD[case]
    check_one_line(run(tmp_path, queues, "--listen", "127.0.0.1:0"), message)
