"""Where direct mode stops: the adapter scraping N exporters itself, no Prometheus (issue 16).

Each "exporter" is one simulated 8-GPU node's real exposition (tests/golden/simulated.prom: the
exporter's renderer on the default scenario, 68 families), its ``Hostname`` made unique, served
on its own loopback port by one aiohttp process; its queue depth changes every second, so every
scrape brings a new body that the adapter must read (an unchanged body is skipped, which real
exporters never give). The adapter runs in direct mode on all N (default scrape cadence) with the
built-in rules; over ``--seconds`` the script reads its CPU (share of one core: the adapter is one
asyncio process), RSS, scrapes per second and mean scrape time (its own histogram), and the age of
its cache (how stale an answer can be).

    .venv/bin/python bench/fleet_direct.py [--nodes 50,200,500] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import threading
import time
from pathlib import Path

from aiohttp import web

BENCH = Path(__file__).resolve().parent
sys.path[0] = str(BENCH.parent)  # the repository first: bench/adapter.py would shadow the package
sys.path.insert(1, str(BENCH.parent / "tests"))
sys.path.append(str(BENCH))

import common  # noqa: E402
from adapter_support import ANONYMOUS, adapter, get  # noqa: E402

GOLDEN = (BENCH.parent / "tests" / "golden" / "simulated.prom").read_text()
DEPTH = re.compile(r"^(rightsizer_queue_depth\{[^}]*\}) \S+$", re.M)
STAMP = re.compile(r"^(rightsizer_last_sample_timestamp_seconds) \S+$", re.M)


def serve(nodes: int) -> tuple[list[str], asyncio.AbstractEventLoop]:
    """N expositions, each on its own loopback port; returns their URLs and the serving loop."""
    bodies = [GOLDEN.replace('Hostname="golden-node"', f'Hostname="node-{i:05d}"') for i in range(nodes)]
    urls: list[str] = []
    loop = asyncio.new_event_loop()

    def handler(i: int):  # type: ignore[no-untyped-def]
        async def metrics(request: web.Request) -> web.Response:
            now = int(time.time())  # a new body every second, as a sampling exporter gives
            text = STAMP.sub(rf"\g<1> {now}", DEPTH.sub(rf"\g<1> {now % 50}", bodies[i]))
            return web.Response(text=text, content_type="text/plain")

        return metrics

    async def start() -> None:
        for i in range(nodes):
            app = web.Application()
            app.router.add_get("/metrics", handler(i))
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            urls.append(f"http://127.0.0.1:{port}")

    loop.run_until_complete(start())
    threading.Thread(target=loop.run_forever, daemon=True).start()
    return urls, loop


def values(text: str, name: str) -> list[float]:
    return [float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)]


def metric(text: str, name: str) -> float:
    return sum(values(text, name))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="50,200,500")
    ap.add_argument("--seconds", type=int, default=20)
    args = ap.parse_args()
    print(f"direct mode: adapter scraping N simulated 8-GPU nodes' expositions "
          f"({GOLDEN.count(chr(10))} lines "
          f"each), {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    for n in (int(x) for x in args.nodes.split(",")):
        urls, loop = serve(n)
        flags = [f"--exporter={u}" for u in urls]
        with adapter(flags, env=ANONYMOUS) as a:
            time.sleep(3)
            before = get(a.url + "/metrics")[2].decode()
            cpu0, t0 = common.cpu_seconds(a.proc.pid), time.monotonic()
            ages = []
            while time.monotonic() - t0 < args.seconds:
                time.sleep(1.0)
                text = get(a.url + "/metrics")[2].decode()
                ages.append(max(values(text, "rightsizer_adapter_cache_age_seconds"), default=0.0))
            after, elapsed = get(a.url + "/metrics")[2].decode(), time.monotonic() - t0
            cpu = 100 * (common.cpu_seconds(a.proc.pid) - cpu0) / elapsed
            name = "rightsizer_adapter_upstream_query_duration_seconds"
            scrapes = metric(after, name + "_count") - metric(before, name + "_count")
            took = metric(after, name + "_sum") - metric(before, name + "_sum")
            print(f"{n:5d} nodes ({8 * n:,} GPUs): adapter CPU {cpu:.0f}% of one core, RSS "
                  f"{common.rss_bytes(a.proc.pid) / 2**20:.0f} MiB, {scrapes / elapsed:,.0f} scrapes/s "
                  f"({scrapes / elapsed / n:.2f} per node per s), "
                  f"mean scrape {1000 * took / max(1, scrapes):.0f} ms, "
                  f"cache age max {max(ages):.1f} s", flush=True)  # fmt: skip
        loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
