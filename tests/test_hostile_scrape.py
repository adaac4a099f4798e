"""Direct mode against hostile exporters: whatever one sends, the adapter stays under its 256Mi limit.

The adapter runs as its own process under ``own_peak_rss.py`` (``hostile_runs.py``), scraping a real
simulated exporter (pod a of ``gpu_rig``) and one hostile endpoint, with the default caps
(``direct.max_body_bytes`` 16 MiB as received and after gzip, ``direct.max_series_per_exporter``
20,000). Each hostile answer must make that exporter down (503 naming it and the cap), with one
log line however many scrapes it spoils, and the adapter's peak RSS must stay under the
manifest's 256 MiB. Before these caps: an endless body took it to 1.86 GiB, a 600 KB gzip bomb
to 1.85 GiB, a valid 60 MB exposition to 1.3 GiB.
"""

from __future__ import annotations

import itertools
import re
import signal
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from adapter_support import get_json
from gpu_rig import POD_A, scenario
from hostile_runs import RSS_LIMIT, finish, start
from queue_servers import FakeHttpServer
from servers import exporter, wait_for

MIB = 2**20
LINE = 'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-{0}",pod="worker-7d9c5b6f8b-{0:05d}",namespace="prod"}} 1\n'


def endless() -> Iterator[bytes]:
    """An exposition that never ends (valid lines, forever)."""
    for i in itertools.count():
        yield "".join(LINE.format(i * 1000 + k) for k in range(1000)).encode()


def gzip_bomb() -> Iterator[bytes]:
    """About 600 KB of gzip that inflates to 600 MiB of zeros."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MIB)
    for _ in range(600):
        yield packer.compress(zeros)
    yield packer.flush()


def big_exposition() -> Iterator[bytes]:
    """A valid exposition of 60 MB (about 600,000 GPU series)."""
    size = 0
    for chunk in endless():
        yield chunk
        size += len(chunk)
        if size >= 60 * 10**6:
            return


def many_series() -> Iterator[bytes]:
    """8 MB, under the byte cap, holding about 80,000 series of a family the rules read."""
    yield from itertools.islice(endless(), 80)


HOSTILE = {  # name -> (chunks, Content-Encoding, what the 503 says)
    "endless body": (endless, "", "over direct.max_body_bytes"),
    "gzip bomb": (gzip_bomb, "gzip", "decompresses to more than direct.max_body_bytes"),
    "60 MB exposition": (big_exposition, "", "over direct.max_body_bytes"),
    "80,000 series": (many_series, "", "more than direct.max_series_per_exporter (20000)"),
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_exporter_is_down_and_the_adapter_stays_under_its_limit(kind: str, tmp_path: Path) -> None:
    chunks, encoding, why = HOSTILE[kind]
    with exporter(["--simulate", str(scenario(tmp_path, "a"))]) as a, FakeHttpServer() as hostile:
        route = hostile.route("/metrics", chunks=chunks, encoding=encoding)
        args = ["--exporter", a.url, "--exporter", hostile.url("/metrics"), "--insecure-http",
                "--listen", "127.0.0.1:0"]  # fmt: skip
        proc = start("adapter", args, tmp_path, {"RIGHTSIZER_ADAPTER_DIRECT_STALE_AFTER_SECONDS": "1"})
        err = tmp_path / "adapter.err"
        try:
            listening = wait_for(lambda: re.search(r"msg=listening address=(\S+)", err.read_text()), 30,
                                 what="the adapter to listen")  # fmt: skip
            base = f"http://{listening.group(1)}/apis/external.metrics.k8s.io/v1beta1/namespaces/prod"
            worker = f"{base}/rightsizer_gpu_busy?labelSelector=workload%3Dworker"
            refused = lambda: why in get_json(worker)[1].get("message", "")  # noqa: E731
            wait_for(refused, 60, what="the hostile exporter to be refused")
            code, body = get_json(worker)
            assert code == 503 and why in body["message"] and hostile.url("/metrics") in body["message"], body
            asked = route.requests
            wait_for(lambda: route.requests >= asked + 3, 60, what="three more scrapes of it")
            # it never gave a usable answer, so it might hold any pod: pod a is refused too
            code, body = get_json(f"{base}/rightsizer_gpu_busy?labelSelector=pod%3D{POD_A}")
            assert code == 503 and "has not answered since the adapter started" in body["message"], body
            time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGTERM)
            outcome = finish(proc, "adapter", tmp_path, 30)
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    failed = [line for line in outcome.stderr.splitlines() if "exporter scrape failed" in line]
    assert len(failed) == 1, failed  # one line, however many scrapes it spoiled
    assert outcome.max_rss_bytes < RSS_LIMIT["adapter"], f"peak RSS {outcome.max_rss_bytes / MIB:.0f} MiB"
