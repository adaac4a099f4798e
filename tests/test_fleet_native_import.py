"""bench/fleet_native.py: a generated fleet's history through VictoriaMetrics's native JSON line
import (``/api/v1/import``), read back from a real VictoriaMetrics with ``/api/v1/export``.

What the fleet benchmark's figures rest on: every GPU of the fleet has its own series, with the
exporter's label sets (as the sample-by-sample text path writes them), a sample at every step, and
the values the simulator's ``evaluate`` gives the representative GPU of its history.
"""

from __future__ import annotations

import json
import math
import sys
import time
import urllib.parse
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.append(str(BENCH))  # appended: bench/exporter.py must not shadow the exporter package

import fleet_history as fh  # noqa: E402
import fleet_native  # noqa: E402
from servers import http_get  # noqa: E402
from victoria_metrics import victoria_metrics  # noqa: E402

GPUS = 40  # 5 nodes: training and serving nodes, queues, idle GPUs
STEP = 30.0
SECONDS = 1800.0


def _labels(series: str) -> frozenset[tuple[str, str]]:
    name, _, rest = series.partition("{")
    return frozenset({("__name__", name), *fleet_native.LABEL.findall(rest)})


def _exported(url: str) -> dict[frozenset[tuple[str, str]], tuple[list[int], list[float]]]:
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
    stamps = [round((start + k * STEP) * 1000) for k in range(int(SECONDS // STEP) + 1)]
    # The text path computes every GPU sample by sample: the values of each representative GPU.
    text: dict[str, list[float]] = defaultdict(list)
    for _, line in fh.lines(gpus, start, SECONDS, STEP, ms=True):
        series, value, _stamp = line.rsplit(" ", 2)
        text[series].append(float(value))
    representative: dict[tuple[str, str, int], fh.Gpu] = {}
    expected: dict[frozenset[tuple[str, str]], list[float]] = {}
    for g in gpus:
        model = dict(_labels(g.prefix[0]))["modelName"]
        rep = representative.setdefault((g.workload.kind, model, g.node % fleet_native.VARIANTS), g)
        for own, theirs in zip(g.prefix, rep.prefix, strict=True):
            expected[_labels(own)] = text[theirs]
        if g.queue:
            assert rep.queue is not None
            expected[_labels(g.queue)] = text[rep.queue]
    nodes = {g.node for g in gpus}
    host = {_labels(fh._host_cpu(n)) for n in nodes}

    with victoria_metrics(args=["-retentionPeriod=100y"]) as vm:
        samples = fleet_native.write_victoria_native(vm.url, gpus, start, SECONDS, STEP, streams=2)
        stored = _exported(vm.url)

    assert samples == (len(expected) + len(nodes)) * len(stamps)
    assert set(stored) == set(expected) | host
    assert len(expected) > GPUS * fh.SERIES_PER_GPU  # the serving GPUs' queues are there too
    for labels, values in expected.items():
        got_stamps, got = stored[labels]
        assert got_stamps == stamps, dict(labels)
        assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(got, values, strict=True))
    for labels in host:
        got_stamps, got = stored[labels]
        assert got_stamps == stamps
        assert all(0.02 <= v <= 1.0 for v in got), dict(labels)
