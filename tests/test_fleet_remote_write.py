"""bench/fleet_remote_write.py: a generated fleet's history through Prometheus's remote-write
receiver (protobuf, snappy-framed), read back from a real Prometheus as raw samples.

What the fleet benchmark's Prometheus figures rest on: every GPU of the fleet has its own series,
with the exporter's label sets, a sample at every step, and the values the simulator's
``evaluate`` gives the representative GPU of its history (the same data VictoriaMetrics gets).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.append(str(BENCH))  # appended: bench/exporter.py must not shadow the exporter package

import fleet_remote_write  # noqa: E402
from fleet_expected import GPUS, Labels, check_stored, fh  # noqa: E402
from servers import prometheus  # noqa: E402

STEP = 30.0
SECONDS = 3 * 3600.0  # longer than the head's 1 h append window: the windows must go in order


def _stored(url: str, at: float) -> dict[Labels, tuple[list[int], list[float]]]:
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
    args = ["--web.enable-remote-write-receiver", "--storage.tsdb.retention.time=3650d"]
    with prometheus({}, args=args) as p:
        samples = fleet_remote_write.write_prometheus_remote(p.url, gpus, start, SECONDS, STEP)
        stored = _stored(p.url, start + SECONDS + 1)
    check_stored(gpus, start, SECONDS, STEP, samples, stored)


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
