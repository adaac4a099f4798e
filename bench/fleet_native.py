"""A fleet's history into VictoriaMetrics through its native JSON line import (``/api/v1/import``):
one line per series, ``{"metric":{...},"values":[...],"timestamps":[...]}``, streamed over chunked
HTTP POSTs (a few at once), never the whole text in memory or on disk.

Computing every GPU's week sample by sample (``fleet_history.lines``) costs about 3 µs per sample in
Python: 855 M samples for 4,000 GPUs x 7 days would take the whole night before the engine sees a
byte. Here the simulator's ``evaluate`` runs once per *history*: GPUs sharing workload kind, GPU
model and ``node % VARIANTS`` share the history of the first of them (its noise, its burst phase),
computed and formatted once; every GPU still has its own series with its own labels, so the engine
stores, compresses and reads exactly as many series and samples as for fully distinct GPUs. A node's
host CPU is the sum of its GPUs' host shares (as in ``fleet_history``), per distinct mix of histories.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from queue import Queue

import fleet_history as fh

from exporter.sources.simulated import workloads as wl

VARIANTS = 8
LABEL = re.compile(r'(\w+)="([^"]*)"')


def _metric(series: str) -> str:
    """``name{a="b",...}`` -> the JSON object of its labels, ``__name__`` included."""
    name, _, rest = series.partition("{")
    return json.dumps({"__name__": name, **dict(LABEL.findall(rest))}, separators=(",", ":"))


def _values(xs: list[float]) -> str:
    return ",".join(fh._num(x) for x in xs)


def history_columns(
    g: fh.Gpu, stamps: list[float], begin: float
) -> tuple[list[list[float]], list[float], list[float]]:
    """One representative GPU's samples at ``stamps`` (its history began at ``begin``), each value
    as the text paths write it (``fh._num``): the PER_GPU columns, its queue depth, its host CPU
    share."""
    columns: list[list[float]] = [[] for _ in fh.PER_GPU]
    queue: list[float] = []
    host: list[float] = []
    for t in stamps:
        a = wl.evaluate(g.workload, g.noise, t, t - begin + 86400.0)
        busy = a.utilization > 0.05 or g.workload.kind == "training"
        host.append(a.host_cpu * busy)
        used = float(min(round(a.memory_bytes / fh.MIB), g.capacity / fh.MIB))
        row = (
            used, a.sm, a.gr_engine, round(100 * a.utilization), round(85 * a.dram), a.occupancy,
            a.tensor, a.dram, round(min(a.pcie_tx, 1.0) * g.link), round(min(a.pcie_rx, 1.0) * g.link),
        )  # fmt: skip
        for col, v in zip(columns, row, strict=True):
            col.append(float(fh._num(v)))
        queue.append(float(round(a.queue_depth)))
    return columns, queue, host


def history_key(g: fh.Gpu) -> tuple[str, str, int]:
    """GPUs with the same key share one history: workload kind, GPU model, node variant."""
    return g.workload.kind, g.prefix[0].split('modelName="', 1)[1].split('"', 1)[0], g.node % VARIANTS


def host_cpu(shares: list[list[float]]) -> list[float]:
    """A node's host CPU busy ratio from its GPUs' host shares, as ``fleet_history`` sums it."""
    return [float(fh._num(min(1.0, 0.02 + sum(col)))) for col in zip(*shares, strict=True)]


class _History:
    """One representative GPU's samples as JSON arrays, and its host CPU shares."""

    def __init__(self, g: fh.Gpu, stamps: list[float], begin: float) -> None:
        columns, queue, self.host = history_columns(g, stamps, begin)
        self.text = [_values(c) for c in columns]
        self.queue = _values(queue) if g.queue else ""


def series_lines(
    gpus: list[fh.Gpu], start: float, seconds: float, step: float
) -> Iterator[tuple[int, bytes]]:
    """(samples, JSON line) per series of the fleet, one series at a time."""
    stamps = [start + k * step for k in range(int(seconds // step) + 1)]
    ts = ",".join(str(round(t * 1000)) for t in stamps)
    n = len(stamps)
    histories: dict[tuple[str, str, int], _History] = {}
    by_node: dict[int, list[_History]] = {}
    for g in gpus:
        key = history_key(g)
        h = histories.get(key)
        if h is None:
            h = histories[key] = _History(g, stamps, start)
        by_node.setdefault(g.node, []).append(h)
        for prefix, text in zip(g.prefix, h.text, strict=True):
            yield n, f'{{"metric":{_metric(prefix)},"values":[{text}],"timestamps":[{ts}]}}\n'.encode()
        if g.queue:
            yield n, f'{{"metric":{_metric(g.queue)},"values":[{h.queue}],"timestamps":[{ts}]}}\n'.encode()
    cpu_text: dict[tuple[int, ...], str] = {}
    for node, hs in by_node.items():
        mix = tuple(sorted(id(h) for h in hs))
        text = cpu_text.get(mix)
        if text is None:
            text = cpu_text[mix] = _values(host_cpu([h.host for h in hs]))
        metric = _metric(fh._host_cpu(node))
        yield n, f'{{"metric":{metric},"values":[{text}],"timestamps":[{ts}]}}\n'.encode()


def write_victoria_native(
    url: str, gpus: list[fh.Gpu], start: float, seconds: float, step: float, streams: int = 2
) -> int:
    """Streams every series to ``url``'s ``/api/v1/import`` over ``streams`` chunked POSTs at
    once, then flushes so queries see them. Returns the samples sent."""
    queue: Queue[bytes | None] = Queue(maxsize=4 * streams)
    errors: list[str] = []
    target = urllib.parse.urlsplit(url)

    def post() -> None:
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=3600)

        def body() -> Iterator[bytes]:
            while (line := queue.get()) is not None:
                yield line

        try:
            conn.request("POST", "/api/v1/import", body=body(), encode_chunked=True,
                         headers={"Content-Type": "application/json"})  # fmt: skip
            response = conn.getresponse()
            if response.status != 204:
                errors.append(f"{response.status} {response.read()[:300]!r}")
        except OSError as e:
            errors.append(str(e))
            while queue.get() is not None:  # drain so the producer never blocks
                pass
        finally:
            conn.close()

    workers = [threading.Thread(target=post, daemon=True) for _ in range(streams)]
    for w in workers:
        w.start()
    samples = 0
    for n, line in series_lines(gpus, start, seconds, step):
        queue.put(line)
        samples += n
    for _ in workers:
        queue.put(None)
    for w in workers:
        w.join()
    if errors:
        raise SystemExit(f"import failed: {errors}")
    with urllib.request.urlopen(url + "/internal/force_flush", timeout=600) as r:
        assert r.status == 200
    return samples
