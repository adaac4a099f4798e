"""The real exporter against hostile sources, its peak RSS measured: for tests and bench/hostile.py.

``measured_exporter`` runs ``python -m exporter`` under ``own_peak_rss.py`` (``hostile.start``) with
a configuration written to a file, waits until it serves, and after the block stops it with SIGTERM
and sets ``Running.outcome`` (exit code, logs, peak RSS of the whole run). The bodies below are what
hostile or broken sources send: each helper says what it builds and how large it is.
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hostile_runs import Outcome, finish, start
from servers import free_port, http_get, wait_for

MIB = 2**20
# A simulated fleet with no queues of its own: the configured sources are the only ones.
SCENARIO = {
    "description": "two GPUs, no simulated queue",
    "gpus": [{"model": "H100-SXM-80GB", "count": 2, "workload": {"kind": "steady_inference"}}],
}


@dataclass
class Running:
    url: str
    outcome: Outcome | None = None

    def queues(self) -> dict[str, dict[str, Any]]:
        status, _, body = http_get(self.url + "/api/v1/queues")
        assert status == 200, body[:300]
        return {q["name"]: q for q in json.loads(body)["queues"]}

    def queue(self, name: str) -> dict[str, Any]:
        return self.queues()[name]

    def api(self, section: str) -> Any:
        status, _, body = http_get(self.url + f"/api/v1/{section}")
        assert status == 200, body[:300]
        return json.loads(body)[section]

    def metrics(self) -> str:
        status, _, body = http_get(self.url + "/metrics")
        assert status == 200
        return body.decode()


@contextlib.contextmanager
def measured_exporter(
    tmp: Path, config: dict[str, Any], args: list[str] | None = None, env: dict[str, str] | None = None
) -> Iterator[Running]:
    path = tmp / "exporter.yaml"
    path.write_text(yaml.safe_dump(config))
    scenario = tmp / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    port = free_port()
    argv = [*(args if args is not None else ["--simulate", str(scenario)]), "--config", str(path)]
    proc = start("exporter", [*argv, "--listen", f"127.0.0.1:{port}"], tmp, env)
    running = Running(f"http://127.0.0.1:{port}")

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError((tmp / "exporter.err").read_text()[-3000:])
        return http_get(running.url + "/readyz")[0] == 200

    try:
        wait_for(ready, 60, what="the exporter to serve")
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        running.outcome = finish(proc, "exporter", tmp, 30)


def settled(running: Running, name: str, timeout: float = 60) -> dict[str, Any]:
    """The queue's API entry once it has been polled."""
    polled = wait_for(lambda: running.queue(name)["up"] is not None, timeout, what=f"{name} polled")
    assert polled
    return running.queue(name)


def many_series(name: str, size: int) -> bytes:
    """An exposition of just under ``size`` bytes: one family, ``name``, with as many series as fit
    (about 60 bytes each: 281,472 in 16 MiB for vLLM's depth)."""
    lines, total, i = [], 0, 0
    while True:
        line = f'{name}{{model_name="m",engine="{i}"}} 1\n'.encode()
        if total + len(line) > size - 1:
            return b"".join(lines)
        lines.append(line)
        total += len(line)
        i += 1


def long_label(name: str, label_bytes: int, depth_family: str | None = None) -> bytes:
    """One series of ``name`` whose label value is ``label_bytes`` long, after a normal depth line."""
    head = f"{depth_family} 3\n".encode() if depth_family else b""
    return head + f'{name}{{model_name="'.encode() + b"m" * label_bytes + b'"} 1\n'


def gpu_pods(count: int) -> list[dict[str, Any]]:
    """``count`` pods in the kubelet's List format, each holding one GPU (ids no GPU here has) and
    an RDMA device: about 170 bytes each once serialized, 120,000 of them some 20 MB."""
    return [
        {
            "name": f"batch-inference-{i:06d}-7d9f8",
            "namespace": "tenant-team-07",
            "containers": [
                {
                    "name": "server",
                    "cpu_ids": [i % 64, (i + 1) % 64],
                    "devices": [
                        {"resource_name": "nvidia.com/gpu", "device_ids": [f"GPU-{i:08d}-0000-4000-8000"]},
                        {"resource_name": "rdma/hca_shared_devices_a", "device_ids": [f"hca-{i:08d}-p1-vf7"]},
                    ],
                }
            ],
        }
        for i in range(count)
    ]
