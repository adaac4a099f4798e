"""Hostile clients against the exporter and the adapter: memory, a scraper's latency, connections.

For each program: 1,000 slow connections (a third idle, a third slowloris, a third sending 8 KB
header lines; each reconnecting as soon as it is closed, unless ``--once``) for ``--seconds``, from a separate
process, while one keep-alive client requests at 10 Hz as a scraper would (the exporter's
/metrics; the adapter's external metrics API over HTTPS, as kube-apiserver does). Prints resident
memory before and at peak against the manifest's limit, the scraper's latency before and during
the attack, and what became of the hostile connections. Then the adapter's KEDA gRPC port:
1,000 connections that never start HTTP/2, memory and when the server closed them.

Then hostile sources against the exporter (``hostile_inputs.py``): answers of hundreds of
thousands of series, a label value of megabytes, JSON megabytes wide or 100,000 deep, a Redis
stream with 150,000 consumer groups, a kubelet answering 120,000 pods: the exporter's peak RSS
for each against the manifest's limit, and what became of the source.

    .venv/bin/python bench/hostile.py [--connections 1000] [--seconds 30] [--part connections|sources]

Figures are for the simulated fleet (8 GPUs; 2 for the sources) on loopback; they move with the
machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import re
import ssl
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlsplit

from common import rss_bytes  # first: puts tests/ on sys.path for the test helpers imported below

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapter_support import ANONYMOUS, get, start_adapter
from hostile_clients import RssWatch, attack, manifest_memory_limit
from servers import ROOT, http_get, start_exporter

KINDS = ("idle", "slowloris", "big_headers")
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/rightsizer_queue_depth"


class Scraper(threading.Thread):
    """One keep-alive client, a request every 100 ms; latencies of the answered ones (ms)."""

    def __init__(self, url: str, path: str) -> None:
        super().__init__(daemon=True)
        parts = urlsplit(url)
        self.host, self.port, self.tls = parts.hostname or "", parts.port or 0, parts.scheme == "https"
        self.path = path
        self.latencies: list[float] = []
        self.failures = 0
        self.recording = threading.Event()
        self.stopping = threading.Event()

    def _connect(self) -> http.client.HTTPConnection:
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            return http.client.HTTPSConnection(self.host, self.port, timeout=10, context=ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=10)

    def run(self) -> None:
        conn = self._connect()
        while not self.stopping.wait(0.1):
            started = time.perf_counter()
            try:
                conn.request("GET", self.path, headers={"Accept-Encoding": "gzip"})
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = self._connect()
            if self.recording.is_set():
                if ok:
                    self.latencies.append((time.perf_counter() - started) * 1000)
                else:
                    self.failures += 1

    def take(self) -> tuple[list[float], int]:
        out, failures = self.latencies, self.failures
        self.latencies, self.failures = [], 0
        return out, failures


def percentiles(values: list[float]) -> str:
    if len(values) < 2:
        return "n/a"
    q = statistics.quantiles(values, n=100)
    return f"p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms ({len(values)} requests)"


def counters(url: str, prefix: str) -> dict[str, float]:
    body = http_get(url + "/metrics")[2] if url.startswith("http:") else _https_get(url + "/metrics")
    out = {}
    for m in re.finditer(rf"^{prefix}(\w+?)(?:_total)?(\{{reason=\"(\w+)\"\}})? (\S+)$", body.decode(), re.M):
        out[m.group(3) or m.group(1)] = float(m.group(4))
    return out


def _https_get(url: str) -> bytes:
    return get(url)[2]


def run_attacker(host: str, port: int, connections: int, seconds: float, tls: bool, sustain: bool) -> None:
    """In its own process, so the scraper's latency is not the attacker's: print the outcome."""

    async def main() -> dict[str, object]:
        per_kind = [connections // 3 + (1 if i < connections % 3 else 0) for i in range(3)]
        outcomes = await asyncio.gather(
            *(
                attack(host, port, n, kind, seconds, tls, sustain)
                for n, kind in zip(per_kind, KINDS, strict=True)
            )
        )
        return {kind: asdict(o) for kind, o in zip(KINDS, outcomes, strict=True)}

    print(json.dumps(asyncio.run(main())))


def measure(
    name: str, pid: int, url: str, path: str, limit: int, prefix: str, args: argparse.Namespace
) -> None:
    scraper = Scraper(url, path)
    scraper.start()
    scraper.recording.set()
    time.sleep(5)
    quiet, quiet_failures = scraper.take()
    before = rss_bytes(pid)
    parts = urlsplit(url)
    attacker = [
        sys.executable,
        __file__,
        "--attacker",
        parts.hostname,
        str(parts.port),
        str(args.connections),
        str(args.seconds),
        "tls" if parts.scheme == "https" else "plain",
        "once" if args.once else "reconnect",
    ]
    with RssWatch(pid) as rss:
        done = subprocess.run(attacker, capture_output=True, text=True, timeout=args.seconds + 120, cwd=ROOT)
    during, failures = scraper.take()
    scraper.stopping.set()
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    server = counters(url, prefix)
    connected = sum(o["connected"] for o in outcome.values())
    how = "opened once" if args.once else "reopened as soon as closed"
    print(f"\n{name}: {args.connections} slow connections ({how}) for {args.seconds:.0f} s + one scraper")
    print(
        f"  RSS: {before / 2**20:.0f} MiB before, peak {rss.peak / 2**20:.0f} MiB during "
        f"(manifest limit {limit / 2**20:.0f} MiB)"
    )
    print(f"  scraper {path}: quiet {percentiles(quiet)}, {quiet_failures} failed")
    print(f"  scraper {path}: under attack {percentiles(during)}, {failures} failed")
    print(
        f"  hostile connections: {connected} accepted by TCP, "
        f"{sum(o['not_connected'] for o in outcome.values())} not connected; the server closed "
        f"{server.get('header_timeout', 0):.0f} at the header deadline, "
        f"evicted {server.get('evicted', 0):.0f} at the cap, "
        f"refused {server.get('refused', 0):.0f} at accept, answered "
        f"{server.get('malformed_requests', 0):.0f} with 4xx; still open at the end "
        f"{sum(o['still_open'] for o in outcome.values())}"
    )
    for kind, o in outcome.items():
        print(
            f"    {kind}: {o['connected']} connections, {o['closed_by_server']} closed by the server, "
            f"answers {o['answers'] or '-'}"
        )


async def _grpc_hold(host: str, port: int, seconds: float) -> float | None:
    """Connect to the gRPC port, send nothing; seconds until the server closed it (None: it did not)."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return 0.0
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass  # the server's HTTP/2 preface
        return time.monotonic() - started
    except TimeoutError:
        return None
    except OSError:
        return time.monotonic() - started
    finally:
        writer.transport.abort()


def measure_grpc(pid: int, address: str, limit: int, args: argparse.Namespace) -> None:
    """KEDA's gRPC port: ``--connections`` that never start HTTP/2, held up to 20 s."""
    host, port = address.rsplit(":", 1)

    async def hold_all() -> list[float | None]:
        return await asyncio.gather(*(_grpc_hold(host, int(port), 20) for _ in range(args.connections)))

    before = rss_bytes(pid)
    with RssWatch(pid) as rss:
        closed = asyncio.run(hold_all())
    at_once = sum(1 for c in closed if c is not None and c < 1)
    at_deadline = sum(1 for c in closed if c is not None and c >= 1)
    print(f"\nadapter gRPC: {args.connections} connections that never start HTTP/2, held up to 20 s")
    print(
        f"  RSS: {before / 2**20:.0f} MiB before, peak {rss.peak / 2**20:.0f} MiB during "
        f"(manifest limit {limit / 2**20:.0f} MiB)"
    )
    print(
        f"  closed by the server at once (over the cap): {at_once}; at the handshake deadline: "
        f"{at_deadline}; still open after 20 s: {closed.count(None)}"
    )


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--attacker":
        host, port, n, seconds, tls, sustain = sys.argv[2:8]
        run_attacker(host, int(port), int(n), float(seconds), tls == "tls", sustain == "reconnect")
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--once", action="store_true", help="each slow connection is opened once, not reopened")
    p.add_argument("--part", choices=["connections", "sources"], help="run only this part (default both)")
    args = p.parse_args()
    if args.part != "connections":
        import hostile_inputs

        hostile_inputs.run()
        hostile_inputs.run_adapter()
        if args.part == "sources":
            return 0
    print(
        "bench/hostile.py: simulated fleet (default scenario, 8 GPUs), loopback, default limits "
        "(header deadline 10 s, 256 connections per listener)"
    )
    exporter = start_exporter(["--simulate"])
    try:
        # Anonymous requests served (and allowed): the scraper and /metrics need no credentials here.
        adapter = start_adapter(["--exporter", exporter.url, "--grpc-listen", "127.0.0.1:0"], env=ANONYMOUS)
        try:
            measure(
                "exporter",
                exporter.proc.pid,
                exporter.url,
                "/metrics",
                manifest_memory_limit("exporter"),
                "rightsizer_http_",
                args,
            )
            measure(
                "adapter (HTTPS)",
                adapter.proc.pid,
                adapter.url,
                EXTERNAL + "?labelSelector=queue%3Dchat-requests",
                manifest_memory_limit("adapter"),
                "rightsizer_adapter_http_",
                args,
            )
            measure_grpc(adapter.proc.pid, adapter.extra["grpc"], manifest_memory_limit("adapter"), args)
        finally:
            adapter.stop()
    finally:
        exporter.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
