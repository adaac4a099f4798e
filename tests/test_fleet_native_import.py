"""bench/fleet_native.py: a generated fleet's history through VictoriaMetrics's native JSON line
import (``/api/v1/import``), read back from a real VictoriaMetrics with ``/api/v1/export``.

What the fleet benchmark's figures rest on: every GPU of the fleet has its own series, with the
exporter's label sets (as the sample-by-sample text path writes them), a sample at every step, and
the values the simulator's ``evaluate`` gives the representative GPU of its history.
"""

from __future__ import annotations

import json
import time
import urllib.parse

from fleet_expected import GPUS, Labels, check_stored, fh, fleet_native
from servers import http_get
from victoria_metrics import victoria_metrics

STEP = 30.0
SECONDS = 1800.0


def _exported(url: str) -> dict[Labels, tuple[list[int], list[float]]]:
    query = urllib.parse.urlencode({"match[]": '{job="rightsizer-exporter"}'})
    status, _, body = http_get(f"{url}/api/v1/export?{query}", timeout=60)
    assert status == 200, body[:300]
    out = {}
    for line in body.decode().splitlines():
        row = json.loads(line)
        out[frozenset(row["metric"].items())] = (row["timestamps"], row["values"])
    return out


def test_every_gpu_has_its_own_series_with_its_history_values() -> None:
    gpus = fh.fleet(GPUS)
    start = (time.time() // 3600) * 3600 - 7200
    with victoria_metrics(args=["-retentionPeriod=100y"]) as vm:
        samples = fleet_native.write_victoria_native(vm.url, gpus, start, SECONDS, STEP, streams=2)
        stored = _exported(vm.url)
    check_stored(gpus, start, SECONDS, STEP, samples, stored)
