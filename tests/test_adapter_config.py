"""Adapter configuration and command line: schema errors name file, key and value; exits are clean."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from servers import ROOT

from adapter.cli import main
from adapter.config import load_config
from adapter.rules import BUILTIN_RULES
from exporter.metrics import FAMILIES_BY_NAME
from rightsizer_core.settings import ConfigError

DIRECT = {"direct": {"exporters": ["http://127.0.0.1:9430"]}}


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "adapter.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_and_modes() -> None:
    cfg = load_config(None, DIRECT, environ={})
    assert cfg.mode == "direct" and cfg.listen == ":6443" and not cfg.insecure_http
    assert [r.name for r in cfg.effective_rules] == [r.name for r in BUILTIN_RULES]
    cfg = load_config(None, {"prometheus": {"url": "https://thanos:10902"}}, environ={})
    assert cfg.mode == "prometheus" and cfg.prometheus.refresh_interval_seconds == 5.0


def test_builtin_rules_read_families_the_exporter_publishes() -> None:
    for rule in BUILTIN_RULES:
        assert rule.direct is not None and rule.query is not None
        assert rule.direct.family in FAMILIES_BY_NAME, rule.name
        assert rule.direct.family in rule.query, rule.name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rulez: []\n", "unknown key 'rulez'"),
        ("listen: nowhere\n", "listen must be HOST:PORT"),
        ("rules:\n  - {direct: {family: x}}\n", "rules[0]: name is required"),
        (
            "rules:\n  - {name: a, direct: {family: x, aggregation: median}}\n",
            "rules[0].direct.aggregation: must be one of sum, avg, max, min; got 'median'",
        ),
        ("rules:\n  - {name: a, match: ['pod'], direct: {family: x}}\n", "is not a label matcher"),
        ("rules:\n  - {name: a}\n", "give a query (Prometheus mode) or direct"),
        ("rules:\n  - {name: 'a b', direct: {family: x}}\n", "must look like a metric name"),
        (
            "rules:\n  - {name: a, direct: {family: x}}\n  - {name: a, direct: {family: y}}\n",
            "two rules are named 'a'",
        ),
        ("prometheus: {url: 'prom:9090'}\n", "must start with http:// or https://"),
        ("direct: {scrape_interval_seconds: 0}\n", "direct.scrape_interval_seconds: must be at least 0.05"),
        ("tls: {cert_file: a.pem}\n", "tls.cert_file and tls.private_key_file go together"),
    ],
)
def test_bad_files_name_file_key_and_value(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(path, DIRECT, environ={})
    assert str(exc.value).startswith(path) and message in str(exc.value)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({}, "give either prometheus.url (--prometheus-url) or exporters (--exporter)"),
        ({**DIRECT, "prometheus": {"url": "http://p:9090"}}, "give either"),
        ({**DIRECT, "insecure_http": True}, "listens on loopback only"),
        ({**DIRECT, "builtin_rules": False}, "no rules"),
        (
            {"prometheus": {"url": "http://p:9090"}, "rules": [{"name": "d", "direct": {"family": "x"}}]},
            "rule 'd' has no query",
        ),
    ],
)
def test_checks_across_sections(flags: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, flags, environ={})


def test_precedence_flags_over_environment_over_file(tmp_path: Path) -> None:
    path = write(
        tmp_path, "listen: 127.0.0.1:7000\nprometheus: {url: 'http://file:9090', timeout_seconds: 3}\n"
    )
    env = {
        "RIGHTSIZER_ADAPTER_PROMETHEUS_URL": "http://env:9090",
        "RIGHTSIZER_ADAPTER_LISTEN": "127.0.0.1:7001",
    }
    cfg = load_config(path, {"listen": "127.0.0.1:7002"}, environ=env)
    assert cfg.prometheus.url == "http://env:9090" and cfg.listen == "127.0.0.1:7002"
    assert cfg.prometheus.timeout_seconds == 3.0
    with pytest.raises(
        ConfigError, match=r"environment \(RIGHTSIZER_ADAPTER_\*\): prometheus.timeout_seconds"
    ):
        load_config(path, {}, environ={"RIGHTSIZER_ADAPTER_PROMETHEUS_TIMEOUT_SECONDS": "soon"})


def test_user_rule_replaces_the_builtin_of_the_same_name(tmp_path: Path) -> None:
    path = write(tmp_path, "rules:\n  - {name: rightsizer_queue_depth, direct: {family: my_depth}}\n")
    rules = {r.name: r for r in load_config(path, DIRECT, environ={}).effective_rules}
    assert rules["rightsizer_queue_depth"].direct.family == "my_depth"  # type: ignore[union-attr]
    assert len(rules) == len(BUILTIN_RULES)


def test_check_config_and_flag_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check-config", "--exporter", "http://127.0.0.1:9430"]) == 0
    assert f"OK (direct mode, {len(BUILTIN_RULES)} rules)" in capsys.readouterr().out
    assert (
        main(["--check-config", "--requestheader-allowed-names", "a, b", "--prometheus-url", "http://p"]) == 0
    )
    assert main(["--check-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rightsizer-adapter: configuration: give either") and err.count("\n") == 1
    assert main(["--check-config", "--exporter", "ftp://x"]) == 2
    assert "exporter URL must start with http://" in capsys.readouterr().err


def run_adapter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapter", "--exporter", "http://127.0.0.1:1", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )


def test_unloadable_certificate_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate")
    run = run_adapter(
        "--tls-cert-file", str(tmp_path / "bad.pem"), "--tls-private-key-file", str(tmp_path / "bad.pem")
    )
    assert run.returncode == 2 and "cannot load the serving certificate" in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_address_in_use_exits_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        run = run_adapter("--listen", f"127.0.0.1:{busy.getsockname()[1]}", "--insecure-http")
    assert run.returncode == 2 and "address already in use" in run.stderr and "Traceback" not in run.stderr


def test_grpc_address_in_use_exits_2_with_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        run = run_adapter(
            "--insecure-http",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            f"127.0.0.1:{busy.getsockname()[1]}",
        )
    assert run.returncode == 2 and "for gRPC" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
