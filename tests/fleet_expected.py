"""What a generated fleet's history must look like once an engine stored it (bench/fleet_history.py's
GPUs, written by bench/fleet_native.py or bench/fleet_remote_write.py): every GPU its own series
with the exporter's label sets, a sample at every step, and the values the simulator's ``evaluate``
gives the representative GPU of its history, as the sample-by-sample text path computes them."""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
if str(BENCH) not in sys.path:
    sys.path.append(str(BENCH))  # appended: bench/exporter.py must not shadow the exporter package

import fleet_history as fh  # noqa: E402
import fleet_native  # noqa: E402

Labels = frozenset[tuple[str, str]]
GPUS = 40  # 5 nodes: training and serving nodes, queues, idle GPUs


def labels_of(series: str) -> Labels:
    name, _, rest = series.partition("{")
    return frozenset({("__name__", name), *fleet_native.LABEL.findall(rest)})


def check_stored(
    gpus: list[fh.Gpu], start: float, seconds: float, step: float, samples: int,
    stored: dict[Labels, tuple[list[int], list[float]]],
) -> None:  # fmt: skip
    """Asserts that ``stored`` (labels -> (timestamps in ms, values)) holds exactly the fleet's
    history, and that the writer counted ``samples`` right."""
    stamps = [round((start + k * step) * 1000) for k in range(int(seconds // step) + 1)]
    text: dict[str, list[float]] = defaultdict(list)
    for _, line in fh.lines(gpus, start, seconds, step, ms=True):
        series, value, _stamp = line.rsplit(" ", 2)
        text[series].append(float(value))
    representative: dict[tuple[str, str, int], fh.Gpu] = {}
    expected: dict[Labels, list[float]] = {}
    for g in gpus:
        rep = representative.setdefault(fleet_native.history_key(g), g)
        for own, theirs in zip(g.prefix, rep.prefix, strict=True):
            expected[labels_of(own)] = text[theirs]
        if g.queue:
            assert rep.queue is not None
            expected[labels_of(g.queue)] = text[rep.queue]
    nodes = {g.node for g in gpus}
    host = {labels_of(fh._host_cpu(n)) for n in nodes}

    assert samples == (len(expected) + len(nodes)) * len(stamps)
    assert set(stored) == set(expected) | host
    assert len(expected) > len(gpus) * fh.SERIES_PER_GPU  # the serving GPUs' queues are there too
    for labels, values in expected.items():
        got_stamps, got = stored[labels]
        assert got_stamps == stamps, dict(labels)
        assert all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(got, values, strict=True))
    for labels in host:
        got_stamps, got = stored[labels]
        assert got_stamps == stamps
        assert all(0.02 <= v <= 1.0 for v in got), dict(labels)
