"""Discovery figures: what one refresh costs on a full node, and how the pod-list walk scales.

A node of 110 pods (Kubernetes' default maximum), 16 of them annotated inference servers holding
one GPU each: the kubelet's /pods over HTTPS with a bearer token (the tests' fake, a real TLS
server), its pod-resources gRPC API (the tests' fake kubelet, in its own process) and its
device-manager checkpoint. Prints the wall time and this process's CPU per refresh (pod list,
pod-resources List, checkpoint, selection, GPU join), in steady state (nothing changed, so no
poller starts); then ``select()`` alone over 110 and 5,000 pods.

    .venv/bin/python bench/discovery.py [--refreshes 50]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/exporter.py would shadow the exporter package: the repository root first, this directory last.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE), str(_HERE)]

import common  # noqa: E402, F401  (puts tests/ on sys.path)
from discovery_rig import TOKEN, KubeletPods, PodSpec, checkpoint_json  # noqa: E402
from pods_fake_kubelet import kubelet_process, short_socket_dir, write_answer  # noqa: E402

from exporter.sources.discovery.extension import Discovery  # noqa: E402
from exporter.sources.discovery.settings import DiscoverySettings  # noqa: E402
from exporter.sources.discovery.targets import select  # noqa: E402
from exporter.sources.pods.settings import PodSettings  # noqa: E402
from rightsizer_core.selectors import EVERYTHING  # noqa: E402

SERVERS = 16


def node(pods: int, servers: int) -> list[PodSpec]:
    out = []
    for n in range(pods):
        serving = n < servers
        out.append(
            PodSpec(
                f"chat-6d4cf56db6-{n:05d}" if serving else f"batch-{n}",
                f"uid-{n:05d}",
                f"10.4.{n // 250}.{n % 250 + 1}",
                8000,
                (f"GPU-{n:08x}-0000-0000-0000-000000000000",) if serving else (),
                annotations={"rightsizer.io/scrape": "true", "rightsizer.io/kind": "vllm"} if serving else {},
                labels={"pod-template-hash": "6d4cf56db6", "app": "chat"} if serving else {"app": "batch"},
                owner=("ReplicaSet", "chat-6d4cf56db6") if serving else ("Job", f"batch-{n}"),
            )
        )
    return out


class NoPollers:
    """Stands in for the queue extension: the figures are discovery's own, not the polls'."""

    async def set_discovered(self, wanted: Any, static_gpus: Any) -> None:
        self.wanted = wanted


async def refreshes(count: int) -> tuple[list[float], list[float], int]:
    d = short_socket_dir()
    tmp = Path(tempfile.mkdtemp(prefix="discovery-bench-"))
    pods = node(110, SERVERS)
    held = [p for p in pods if p.gpus]
    write_answer(d / "answer.json", [p.pod_resources() for p in held])
    (d / "checkpoint.json").write_text(checkpoint_json(held))
    (tmp / "token").write_text(TOKEN)
    try:
        with KubeletPods(tmp, pods) as kubelet, kubelet_process(d / "kubelet.sock", d / "answer.json"):
            settings = DiscoverySettings(
                enabled=True, kubelet_url=kubelet.url, tls_ca_file=str(kubelet.ca_file),
                bearer_token_file=str(tmp / "token"),
            )  # fmt: skip
            pod_settings = PodSettings(socket=str(d / "kubelet.sock"), checkpoint=str(d / "checkpoint.json"))
            queues = NoPollers()
            found = Discovery(settings, pod_settings, queues, [])  # type: ignore[arg-type]
            await found.refresh()  # the first: TLS handshake, connection
            assert len(queues.wanted) == SERVERS and all(q.gpus for q in queues.wanted), found._api
            walls, cpus = [], []
            for _ in range(count):
                wall, cpu = time.perf_counter(), time.process_time()
                await found.refresh()
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
            await found.stop()
            return walls, cpus, len(queues.wanted)
    finally:
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def walk(pods: int, rounds: int) -> float:
    items = [p.item() for p in node(pods, SERVERS)]
    settings = DiscoverySettings(enabled=True)
    best = []
    for _ in range(rounds):
        started = time.perf_counter()
        select(items, settings, EVERYTHING, ())
        best.append(time.perf_counter() - started)
    return statistics.median(best)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--refreshes", type=int, default=50)
    args = parser.parse_args()
    walls, cpus, servers = asyncio.run(refreshes(args.refreshes))
    print(f"one refresh, 110 pods, {servers} servers found and linked to their GPUs "
          f"({args.refreshes} refreshes):")  # fmt: skip
    print(f"  wall  median {statistics.median(walls) * 1e3:.1f} ms, max {max(walls) * 1e3:.1f} ms")
    print(
        f"  CPU   median {statistics.median(cpus) * 1e3:.1f} ms "
        "(this process, the fake kubelet's HTTPS server included)"
    )
    print(
        f"  at the default refresh_interval_seconds 10: {statistics.median(cpus) / 10 * 100:.2f} % of a core"
    )
    for pods in (110, 5000):
        print(f"select() over {pods} pods: {walk(pods, 20) * 1e3:.2f} ms (median of 20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
