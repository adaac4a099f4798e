"""VictoriaMetrics (single node, Debian's ``victoria-metrics``) as a second Prometheus-compatible
engine: started on a free loopback port, fed by scraping (``-promscrape.config``, the same
``scrape_configs`` a Prometheus reads) and/or by its import API.

Two flags bring its answers in line with Prometheus's defaults, as a user running both would set
them: ``-search.latencyOffset=0s`` (by default the last 30 s of samples are hidden from queries)
and ``-search.maxLookback=5m`` (Prometheus's lookback delta; by default VictoriaMetrics derives it
from the interval between samples). The response cache is off, since tests write the past.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from servers import Process, free_port, http_get, require_binary, wait_for

FLAGS = ("-search.latencyOffset=0s", "-search.maxLookback=5m", "-search.disableCache", "-loggerLevel=WARN")


@contextlib.contextmanager
def victoria_metrics(scrape_configs: str | None = None, args: Sequence[str] = ()) -> Iterator[Process]:
    """A real VictoriaMetrics; ``scrape_configs``: YAML items of a ``scrape_configs`` list (as
    Prometheus reads them) to scrape with ``-promscrape.config``. Yields it with ``.url`` set."""
    binary = require_binary("victoria-metrics")
    workdir = Path(tempfile.mkdtemp(prefix="victoria-metrics-"))
    port = free_port()
    cmd = [binary, f"-storageDataPath={workdir / 'data'}", f"-httpListenAddr=127.0.0.1:{port}", *FLAGS, *args]
    if scrape_configs is not None:
        (workdir / "scrape.yml").write_text(f"scrape_configs:\n{scrape_configs}\n")
        cmd.append(f"-promscrape.config={workdir / 'scrape.yml'}")
    log_path = workdir / "victoria-metrics.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    p = Process(proc, log_path, f"http://127.0.0.1:{port}", {"workdir": workdir})
    try:
        wait_for(lambda: _healthy(p), 30, what="VictoriaMetrics to be ready")
        yield p
    finally:
        p.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _healthy(p: Process) -> bool:
    if p.proc.poll() is not None:
        raise AssertionError(f"victoria-metrics exited with {p.proc.returncode}:\n{p.log()}")
    return http_get(p.url + "/health")[0] == 200


def import_text(url: str, lines: Iterable[str], batch_bytes: int = 8 << 20) -> int:
    """Sends Prometheus text-format sample lines (``name{labels} value timestamp_ms``) to
    ``/api/v1/import/prometheus`` in batches, then flushes so queries see them. Returns the lines sent."""
    sent = 0
    batch: list[str] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line) + 1
        sent += 1
        if size >= batch_bytes:
            _post(url + "/api/v1/import/prometheus", "\n".join(batch) + "\n")
            batch, size = [], 0
    if batch:
        _post(url + "/api/v1/import/prometheus", "\n".join(batch) + "\n")
    status, _, body = http_get(url + "/internal/force_flush")
    assert status == 200, body[:300]
    return sent


def _post(url: str, text: str) -> None:
    request = urllib.request.Request(url, data=text.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 204, response.status
