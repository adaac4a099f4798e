"""Real servers for the tests: the exporter as a subprocess, Prometheus, Redis.

Each is started on loopback on a free port and stopped at the end of its fixture. Debian's
``prometheus`` and ``redis-server`` must be installed (``scripts/test`` installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as it is held: bound but never
    listening, so no other process can take it (a port from ``free_port`` is released at once,
    and another test's server may listen there by the time it is dialled)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def http_get(
    url: str,
    headers: Mapping[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def wait_for(predicate: Any, timeout: float, interval: float = 0.1, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # keep polling; report the last error on timeout
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}" + (f": {last_exc}" if last_exc else "")
    )


@dataclass
class Process:
    proc: subprocess.Popen[str]
    log_path: Path
    url: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_module(
    module: str,
    args: Sequence[str],
    listening: Callable[[Process], str | None],
    ready_url: Callable[[str], int],
    env: Mapping[str, str] | None = None,
    ready: bool = True,
    timeout: float = 30,
) -> Process:
    """Run ``python -m <module>`` with ``args`` (``--listen 127.0.0.1:0`` added unless given), wait
    until ``listening(process)`` returns its base URL (read from its log) and, with ``ready``, until
    ``ready_url(url)`` answers 200."""
    args = list(args)
    if not any(a == "--listen" or a.startswith("--listen=") for a in args):
        args += ["--listen", "127.0.0.1:0"]
    log_file = tempfile.NamedTemporaryFile("w", prefix=f"{module}-", suffix=".log", delete=False)  # noqa: SIM115
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=full_env,
        cwd=ROOT,
        text=True,
    )
    p = Process(proc, Path(log_file.name))

    def started() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(f"{module} exited with {proc.returncode}:\n{p.log()}")
        return listening(p)

    try:
        p.url = wait_for(started, timeout, what=f"{module} to listen")
        if ready:
            wait_for(lambda: ready_url(p.url) == 200, timeout, what=f"{module}'s /readyz")
    except BaseException:
        p.stop()
        raise
    return p


def start_exporter(
    args: Sequence[str], env: Mapping[str, str] | None = None, ready: bool = True, timeout: float = 30
) -> Process:
    """Run the exporter (``python -m exporter``) and wait until it listens and is ready."""

    def listening(p: Process) -> str | None:
        m = re.search(r"msg=listening address=([0-9.]+):(\d+)", p.log())
        return f"http://{m.group(1)}:{m.group(2)}" if m else None

    return start_module(
        "exporter", args, listening, lambda url: http_get(url + "/readyz")[0], env, ready, timeout
    )


@contextlib.contextmanager
def exporter(
    args: Sequence[str], env: Mapping[str, str] | None = None, ready: bool = True
) -> Iterator[Process]:
    p = start_exporter(args, env, ready)
    try:
        yield p
    finally:
        p.stop()


def require_binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if path is None:
        raise RuntimeError(f"{name} is not installed; run scripts/test, which installs the Debian packages")
    return path


@contextlib.contextmanager
def prometheus(
    scrape_targets: Mapping[str, Sequence[str]],
    scrape_interval: str = "1s",
    extra_config: str = "",
    args: Sequence[str] = (),
    data_dir: Path | None = None,
    port: int | None = None,
) -> Iterator[Process]:
    """A real Prometheus scraping ``{job: [host:port, ...]}``; yields it with ``.url`` set.
    ``data_dir``: a TSDB directory to start from (e.g. blocks written by ``promtool tsdb
    create-blocks-from``) instead of an empty one; the caller removes it. ``port``: listen there
    (to restart one at the same address)."""
    binary = require_binary("prometheus")
    workdir = Path(tempfile.mkdtemp(prefix="prometheus-"))
    jobs = "\n".join(
        f"  - job_name: {json.dumps(job)}\n    static_configs:\n      - targets: {json.dumps(list(targets))}"
        for job, targets in scrape_targets.items()
    )
    (workdir / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n"
        f"scrape_configs:\n{jobs}\n{extra_config}"
    )
    port = port or free_port()
    log_path = workdir / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={data_dir or workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    p = Process(proc, log_path, f"http://127.0.0.1:{port}", {"workdir": workdir})
    try:
        wait_for(lambda: http_get(p.url + "/-/ready")[0] == 200, 30, what="Prometheus to be ready")
        yield p
    finally:
        p.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def prom_query(base_url: str, query: str, time_: float | None = None) -> list[dict[str, Any]]:
    params = {"query": query}
    if time_ is not None:
        params["time"] = str(time_)
    status, _, body = http_get(f"{base_url}/api/v1/query?{urllib.parse.urlencode(params)}")
    data = json.loads(body)
    if status != 200 or data.get("status") != "success":
        raise AssertionError(f"query {query!r} failed: {status} {body[:300]!r}")
    return list(data["data"]["result"])


@contextlib.contextmanager
def redis_server(port: int | None = None) -> Iterator[Process]:
    """A real redis-server on loopback (no persistence); ``.extra['port']`` holds its port."""
    binary = require_binary("redis-server")
    workdir = Path(tempfile.mkdtemp(prefix="redis-"))
    port = port or free_port()
    log_path = workdir / "redis.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    p = Process(proc, log_path, f"redis://127.0.0.1:{port}/0", {"port": port, "workdir": workdir})

    def accepting() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")

    try:
        wait_for(accepting, 15, what="redis-server to accept connections")
        yield p
    finally:
        p.stop()
        shutil.rmtree(workdir, ignore_errors=True)
