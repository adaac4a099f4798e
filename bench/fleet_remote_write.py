"""A fleet's history into Prometheus through its remote-write receiver
(``--web.enable-remote-write-receiver``): protobuf ``WriteRequest`` messages, snappy-framed, sent in
time order, half an hour of every series at a time, so the head appends in order (no
out-of-order window) and Prometheus cuts and compacts its blocks as it does for scraped data.

``promtool tsdb create-blocks-from openmetrics`` parses its whole input once per 2-hour block and
took about 19 k samples/s here: 855 M samples for 4,000 GPUs x 7 days would take half a day. As in
``fleet_native`` (VictoriaMetrics), the simulator's ``evaluate`` runs once per *history* (GPUs
sharing workload kind, GPU model and node variant share one), and each history's samples are encoded
once per window; every GPU still has its own series with its own labels, so Prometheus stores,
compresses and reads exactly as many series and samples as for fully distinct GPUs.

The messages are encoded here (prompb's ``WriteRequest``/``TimeSeries``/``Label``/``Sample``: four
messages of two fields each) and snappy-framed as one literal block, which every snappy decoder
reads: no protobuf or snappy package for a benchmark.
"""

from __future__ import annotations

import http.client
import re
import struct
import threading
import urllib.parse
from collections.abc import Iterator
from queue import Queue

import fleet_history as fh
import fleet_native as fn

WINDOW = 1800.0  # seconds of every series per round: under the head's 1 h append window
BATCH = 8 << 20  # bytes of protobuf per request
LABEL = re.compile(r'(\w+)="([^"]*)"')


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(payload)) + payload


def labels_message(series: str) -> bytes:
    """``name{a="b",...}`` -> its ``Label`` fields of a ``TimeSeries``, sorted by name as
    Prometheus keeps them."""
    name, _, rest = series.partition("{")
    pairs = sorted([("__name__", name), *LABEL.findall(rest)])
    return b"".join(_field(0x0A, _field(0x0A, k.encode()) + _field(0x12, v.encode())) for k, v in pairs)


def samples_message(values: list[float], stamps_ms: list[bytes]) -> bytes:
    """The ``Sample`` fields of a ``TimeSeries``: value (double) and timestamp (varint ms)."""
    return b"".join(
        _field(0x12, b"\x09" + struct.pack("<d", v) + ts) for v, ts in zip(values, stamps_ms, strict=True)
    )


def snappy_block(data: bytes) -> bytes:
    """Snappy's block format holding ``data`` as one literal (no compression: loopback)."""
    if not data:
        return b"\x00"
    n = len(data) - 1
    return _varint(len(data)) + bytes((63 << 2,)) + struct.pack("<I", n) + data


def requests(
    gpus: list[fh.Gpu], start: float, seconds: float, step: float
) -> Iterator[tuple[int, bytes, bool]]:
    """(samples, snappy-framed WriteRequest, whether it ends its window) covering every series of
    the fleet from ``start`` to ``start + seconds`` (both included), window after window."""
    total = int(seconds // step) + 1
    labels = [[labels_message(p) for p in g.prefix] for g in gpus]
    queues = [labels_message(g.queue) if g.queue else b"" for g in gpus]
    nodes = sorted({g.node for g in gpus})
    hosts = {n: labels_message(fh._host_cpu(n)) for n in nodes}
    per_window = max(1, int(WINDOW // step))
    for first in range(0, total, per_window):
        stamps = [start + k * step for k in range(first, min(total, first + per_window))]
        ms = [b"\x10" + _varint(round(t * 1000)) for t in stamps]
        encoded: dict[tuple[str, str, int], tuple[list[bytes], bytes, list[float]]] = {}
        shares: dict[int, list[list[float]]] = {}
        body: list[bytes] = []
        size = samples = 0
        for g, own, queue in zip(gpus, labels, queues, strict=True):
            key = fn.history_key(g)
            if key not in encoded:
                columns, depth, host = fn.history_columns(g, stamps, start)
                encoded[key] = ([samples_message(c, ms) for c in columns], samples_message(depth, ms), host)
            columns_msg, queue_msg, host = encoded[key]
            shares.setdefault(g.node, []).append(host)
            series = list(zip(own, columns_msg, strict=True))
            if queue:
                series.append((queue, queue_msg))
            for lab, smp in series:
                ts = _field(0x0A, lab + smp)
                body.append(ts)
                size += len(ts)
                samples += len(stamps)
            if size >= BATCH:
                yield samples, snappy_block(b"".join(body)), False
                body, size, samples = [], 0, 0
        for n in nodes:
            body.append(_field(0x0A, hosts[n] + samples_message(fn.host_cpu(shares[n]), ms)))
            samples += len(stamps)
        yield samples, snappy_block(b"".join(body)), True


def write_prometheus_remote(
    url: str, gpus: list[fh.Gpu], start: float, seconds: float, step: float, streams: int = 2
) -> int:
    """Sends every series to ``url``'s ``/api/v1/write`` over ``streams`` connections at once, in
    time order: a window's requests go out together, the next window's once all of them are
    answered (one series' samples must reach the head in order). Returns the samples sent."""
    queue: Queue[bytes | None] = Queue(maxsize=2 * streams)
    errors: list[str] = []
    target = urllib.parse.urlsplit(url)
    headers = {
        "Content-Encoding": "snappy",
        "Content-Type": "application/x-protobuf",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
    }

    def post() -> None:
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=600)
        try:
            while (payload := queue.get()) is not None:
                try:
                    if not errors:
                        conn.request("POST", "/api/v1/write", body=payload, headers=headers)
                        response = conn.getresponse()
                        text = response.read()
                        if response.status not in (200, 204):
                            errors.append(f"{response.status} {text[:300]!r}")
                except (OSError, http.client.HTTPException) as e:  # keep taking payloads: never block
                    errors.append(f"{type(e).__name__}: {e}")
                finally:
                    queue.task_done()
        finally:
            conn.close()

    workers = [threading.Thread(target=post, daemon=True) for _ in range(streams)]
    for w in workers:
        w.start()
    samples = 0
    for n, payload, window_ends in requests(gpus, start, seconds, step):
        queue.put(payload)
        samples += n
        if window_ends:
            queue.join()
        if errors:
            break
    for _ in workers:
        queue.put(None)
    for w in workers:
        w.join()
    if errors:
        raise SystemExit(f"remote write failed: {errors[:3]}")
    return samples
