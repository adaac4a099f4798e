"""An SLO declared for a workload that no queue carries is never judged: ``--check-config`` warns
(naming the SLO and the workloads that exist), a running exporter logs one warning line per such
SLO at start, and the status page and ``/api/v1/rightsizing`` say it. An SLO that matches says
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from servers import exporter, http_get

from exporter.cli import main as exporter_main

QUEUES = [
    {"name": "chat-q", "kind": "vllm", "url": "http://chat-vllm:8000/metrics",
     "labels": {"namespace": "llm", "workload": "chat-8b"}},
    {"name": "jobs", "kind": "redis", "url": "redis://127.0.0.1:6379/0", "key": "jobs"},
]  # fmt: skip


def write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_check_config_names_the_slo_and_the_workloads_that_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slos = [
        {"namespace": "llm", "workload": "chat", "ttft_seconds": 0.5},  # a typo of chat-8b
        {"namespace": "llm", "workload": "chat-8b", "ttft_seconds": 0.5},  # matches chat-q
        {"queue": "job", "e2e_seconds": 30},  # a typo of the queue's name
    ]
    path = write(tmp_path, {"queues": QUEUES, "slos": slos})
    assert exporter_main(["--check-config", "--config", path]) == 0
    out = capsys.readouterr()
    assert out.out == f"{path}: OK\n"
    queues = "llm/chat-8b (queue chat-q), queue jobs (no workload label)"
    assert out.err.splitlines() == [
        f"rightsizer-exporter: warning: the SLO for llm/chat matches no queue, so it is never judged; "
        f"queues: {queues}",
        f"rightsizer-exporter: warning: the SLO for queue 'job' matches no queue, so it is never judged; "
        f"queues: {queues}",
    ]


def test_check_config_with_no_queue_at_all_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"slos": [{"namespace": "llm", "workload": "chat", "ttft_seconds": 0.5}]})
    assert exporter_main(["--check-config", "--config", path]) == 0
    err = capsys.readouterr().err
    assert (
        "the SLO for llm/chat matches no queue" in err and "none (no queue is configured or simulated)" in err
    )


def test_check_config_of_a_matching_slo_says_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, {"queues": QUEUES, "slos": [{"queue": "jobs", "e2e_seconds": 30}]})
    assert exporter_main(["--check-config", "--config", path]) == 0
    assert capsys.readouterr().err == ""


def test_check_config_knows_the_simulated_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The golden scenario's one queue is summarizer-requests, for llm/summarizer."""
    path = write(tmp_path, {"slos": [{"namespace": "llm", "workload": "summariser", "ttft_seconds": 1}]})
    assert exporter_main(["--check-config", "--config", path, "--simulate", "golden"]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert "the SLO for llm/summariser matches no queue" in line
    assert line.endswith("queues: llm/summarizer (queue summarizer-requests)"), line


def test_a_running_exporter_warns_at_start_and_on_its_page(tmp_path: Path) -> None:
    slos = [
        {"namespace": "llm", "workload": "summariser", "ttft_seconds": 1},
        {"namespace": "llm", "workload": "summarizer", "ttft_seconds": 1},
    ]
    path = write(tmp_path, {"slos": slos})
    with exporter(["--simulate", "golden", "--config", path]) as p:
        status, _, body = http_get(p.url + "/api/v1/rightsizing")
        page = http_get(p.url + "/")[2].decode()
        log = p.log()
    warned = [line for line in log.splitlines() if "SLO matches no queue" in line]
    assert len(warned) == 1, log
    assert "level=warning" in warned[0] and "slo=llm/summariser" in warned[0], warned
    assert 'queues="llm/summarizer (queue summarizer-requests)"' in warned[0], warned
    assert status == 200
    lost = json.loads(body)["rightsizing"]["slos_unmatched"]
    assert [u["slo"] for u in lost] == ["llm/summariser"]
    section = page[page.index("<h2>Latency SLOs</h2>") :]
    assert "the SLO for llm/summariser matches no queue, so it is never judged" in section
    assert "llm/summarizer (queue summarizer-requests)" in section
