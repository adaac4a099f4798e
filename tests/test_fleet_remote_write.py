"""bench/fleet_remote_write.py: a generated fleet's history through Prometheus's remote-write
receiver (protobuf, snappy-framed), read back from a real Prometheus as raw samples.

What the fleet benchmark's Prometheus figures rest on: every GPU of the fleet has its own series,
with the exporter's label sets, a sample at every step, and the values the simulator's
``evaluate`` gives the representative GPU of its history (the same data VictoriaMetrics gets).
"""

from __future__ import annotations

import json
import math
import sys
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.append(str(BENCH))  # appended: bench/exporter.py must not shadow the exporter package

import fleet_history as fh  # noqa: E402
import fleet_native  # noqa: E402
import fleet_remote_write  # noqa: E402
from servers import prometheus  # noqa: E402

GPUS = 40  # 5 nodes: training and serving nodes, queues, idle GPUs
STEP = 30.0
SECONDS = 3 * 3600.0  # longer than the head's 1 h append window: the windows must go in order


def _labels(series: str) -> frozenset[tuple[str, str]]:
    name, _, rest = series.partition("{")
    return frozenset({("__name__", name), *fleet_native.LABEL.findall(rest)})


def _stored(url: str, at: float) -> dict[frozenset[tuple[str, str]], tuple[list[int], list[float]]]:
    body = urllib.parse.urlencode(
        {"query": f'{{job="rightsizer-exporter"}}[{int(SECONDS) + 60}s]', "time": f"{at:.3f}"}
    ).encode()
    with urllib.request.urlopen(url + "/api/v1/query", data=body, timeout=60) as r:
        result = json.loads(r.read())["data"]["result"]
    return {
        frozenset(x["metric"].items()): (
            [round(t * 1000) for t, _ in x["values"]],
            [float(v) for _, v in x["values"]],
        )
        for x in result
    }


def test_every_gpu_has_its_own_series_with_its_history_values() -> None:
    gpus = fh.fleet(GPUS)
    start = (time.time() // 3600) * 3600 - 6 * 3600
    stamps = [round((start + k * STEP) * 1000) for k in range(int(SECONDS // STEP) + 1)]
    text: dict[str, list[float]] = defaultdict(list)
    for _, line in fh.lines(gpus, start, SECONDS, STEP, ms=True):
        series, value, _stamp = line.rsplit(" ", 2)
        text[series].append(float(value))
    representative: dict[tuple[str, str, int], fh.Gpu] = {}
    expected: dict[frozenset[tuple[str, str]], list[float]] = {}
    for g in gpus:
        rep = representative.setdefault(fleet_native.history_key(g), g)
        for own, theirs in zip(g.prefix, rep.prefix, strict=True):
            expected[_labels(own)] = text[theirs]
        if g.queue:
            assert rep.queue is not None
            expected[_labels(g.queue)] = text[rep.queue]
    nodes = {g.node for g in gpus}
    host = {_labels(fh._host_cpu(n)) for n in nodes}

    with prometheus(
        {}, args=["--web.enable-remote-write-receiver", "--storage.tsdb.retention.time=3650d"]
    ) as p:
        samples = fleet_remote_write.write_prometheus_remote(p.url, gpus, start, SECONDS, STEP)
        stored = _stored(p.url, start + SECONDS + 1)

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


def test_snappy_block_is_one_literal_a_decoder_reads() -> None:
    """The framing the receiver decodes: length preamble, then one literal element (tag 63<<2
    with a 4-byte length - 1), then the bytes."""
    data = bytes(range(256)) * 300
    block = fleet_remote_write.snappy_block(data)
    n, shift, i = 0, 0, 0
    while True:
        b = block[i]
        n |= (b & 0x7F) << shift
        i += 1
        shift += 7
        if b < 0x80:
            break
    assert n == len(data)
    assert block[i] == 63 << 2 and int.from_bytes(block[i + 1 : i + 5], "little") == len(data) - 1
    assert block[i + 5 :] == data
