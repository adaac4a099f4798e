"""A Prometheus behind an authenticating proxy that refuses our credentials (401) or our rights
(403) is named as such, with the status and the credentials that were sent, by ``rightsizer
report`` and by the adapter (not "not the Prometheus query API" nor "a body that is not JSON");
a bearer token file that is missing or empty is refused by ``--check-config`` of both programs that
take one. Real Prometheus behind a proxy answering as kube-rbac-proxy does (tests/fake_auth_proxy.py),
real report and adapter processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from adapter_support import ANONYMOUS, EXT, adapter, get
from fake_auth_proxy import ALLOWED, NO_RIGHTS, auth_proxy
from servers import ROOT, prometheus, wait_for

JOBS = f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs"


@pytest.fixture(scope="module")
def proxied() -> Iterator[str]:
    with prometheus({"self": []}) as prom, auth_proxy(prom.url) as url:
        yield url


def token(tmp: Path, value: str) -> str:
    path = tmp / "token"
    path.write_text(value + "\n")
    return str(path)


def report(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_report_names_an_authentication_failure(proxied: str, tmp_path: Path) -> None:
    bare = report(proxied)
    assert bare.returncode == 2 and bare.stderr == (
        f"rightsizer: authentication failed: Prometheus at {proxied} answered HTTP 401 "
        "(no credentials were sent)\n"
    )
    wrong = token(tmp_path, "expired-token")
    refused = report(proxied, "--bearer-token-file", wrong)
    assert refused.returncode == 2 and refused.stderr == (
        f"rightsizer: authentication failed: Prometheus at {proxied} answered HTTP 401 "
        f"(it did not accept the bearer token of --bearer-token-file {wrong})\n"
    )


def test_report_names_an_authorization_failure(proxied: str, tmp_path: Path) -> None:
    known = token(tmp_path, NO_RIGHTS)
    forbidden = report(proxied, "--bearer-token-file", known)
    assert forbidden.returncode == 2 and forbidden.stderr == (
        f"rightsizer: authorization failed: Prometheus at {proxied} answered HTTP 403 (it knows the "
        f"bearer token of --bearer-token-file {known} but does not allow this query with them)\n"
    )
    header = report(proxied, "--header", f"Authorization: Bearer {NO_RIGHTS}")
    assert "HTTP 403 (it knows a bearer token in a configured Authorization header" in header.stderr


def test_report_with_the_allowed_token_reaches_prometheus(proxied: str, tmp_path: Path) -> None:
    done = report(proxied, "--bearer-token-file", token(tmp_path, ALLOWED))
    assert done.returncode == 2 and "no GPU series" in done.stderr, done.stderr  # Prometheus's answer
    assert "failed" not in done.stderr


@pytest.mark.parametrize(
    ("value", "words"),
    [("expired-token", "authentication failed"), (NO_RIGHTS, "authorization failed")],
)
def test_adapter_names_the_refusal(proxied: str, tmp_path: Path, value: str, words: str) -> None:
    path = token(tmp_path, value)
    args = ["--prometheus-url", proxied, "--prometheus-bearer-token-file", path, "--refresh-interval", "0.5"]
    status = 401 if words.startswith("authentication") else 403
    with adapter(args, ready=False, env=ANONYMOUS) as p:

        def refused() -> str | None:  # 503 "no refresh has completed yet" until the first refresh
            code, _, body = get(p.url + JOBS)
            message = str(json.loads(body)["message"])
            return message if code == 503 and "answered HTTP" in message else None

        message = wait_for(refused, 30, what="a 503 naming the refusal")
        assert f"{words}: prometheus at {proxied} answered HTTP {status}" in message, message
        assert f"bearer token of prometheus.bearer_token_file {path}" in message, message
        assert "not JSON" not in message and "Traceback" not in p.log()


@pytest.mark.parametrize("content", [None, "", "  \n"], ids=["missing", "empty", "blank"])
def test_check_config_refuses_an_unusable_token_file(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    adapter_args = ["--prometheus-url", "http://127.0.0.1:9", "--prometheus-bearer-token-file", str(path)]
    checked = subprocess.run([sys.executable, "-m", "adapter", *adapter_args, "--check-config"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert checked.returncode == 2 and checked.stderr.count("\n") == 1, checked
    assert f"prometheus.bearer_token_file {path}: " in checked.stderr, checked.stderr
    assert ("No such file" if content is None else "it is empty") in checked.stderr, checked.stderr
    config = tmp_path / "exporter.yaml"
    config.write_text(
        "queues:\n  - {name: chat, kind: vllm, url: 'http://127.0.0.1:9/metrics', "
        f"bearer_token_file: '{path}'}}\n"
    )
    exporter = subprocess.run([sys.executable, "-m", "exporter", "--config", str(config), "--check-config"],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert exporter.returncode == 2, exporter
    assert f"bearer_token_file '{path}'" in exporter.stderr, exporter.stderr
    assert ("No such file" if content is None else "is empty") in exporter.stderr, exporter.stderr
    assert "Traceback" not in checked.stderr + exporter.stderr
