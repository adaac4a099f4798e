"""Exporter figures (issue 2): scrape latency and the exporter's own cost, for 8 and 64 simulated
GPUs, with node_exporter measured in the same run as a yardstick when Debian's
prometheus-node-exporter is installed.

    .venv/bin/python bench/exporter.py [--seconds 60] [--wrk-seconds 10]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time

from common import PROMETHEUS_HEADERS, Latency, measure_cpu, wrk
from servers import exporter, free_port, http_get, wait_for


def scrape_figures(url: str, wrk_seconds: int) -> dict[int, Latency]:
    return {c: wrk(url, c, wrk_seconds, PROMETHEUS_HEADERS) for c in (1, 20)}


def node_exporter(wrk_seconds: int) -> tuple[dict[int, Latency], int] | None:
    binary = shutil.which("prometheus-node-exporter")
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for(lambda: http_get(url)[0] == 200, 15, what="node_exporter")
        series = sum(1 for ln in http_get(url)[2].decode().splitlines() if ln and not ln.startswith("#"))
        return scrape_figures(url, wrk_seconds), series
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=int, default=60, help="CPU/RSS measuring window")
    ap.add_argument("--wrk-seconds", type=int, default=10)
    args = ap.parse_args()

    cost: dict[int, float] = {}
    for scenario, gpus in (("default", 8), ("large64", 64)):
        with exporter(["--simulate", scenario, "--interval", "1"]) as p:
            url = p.url + "/metrics"
            series = sum(1 for ln in http_get(url)[2].decode().splitlines() if ln and not ln.startswith("#"))
            time.sleep(3)  # let the first scrape formats be pre-rendered
            cpu, rss = measure_cpu(p.proc.pid, args.seconds,
                                   during=lambda url=url: http_get(url, PROMETHEUS_HEADERS))
            lat = scrape_figures(url, args.wrk_seconds)
        cost[gpus] = cpu
        print(f"{gpus:>3} GPUs ({series} series): exporter CPU {cpu:.2f}% of one core, peak RSS "
              f"{rss / 2**20:.1f} MiB over {args.seconds}s at 1 s sampling, scraped once a second")
        for c, latency in lat.items():
            print(f"    scrape, {c:>2} concurrent keep-alive scraper(s): p50 {latency.p50_ms:.2f} ms, "
                  f"p99 {latency.p99_ms:.2f} ms, {latency.requests_per_second:.0f} scrapes/s")
    print(f"64-GPU cost / 8-GPU cost (CPU): {cost[64] / cost[8]:.2f}x")

    yardstick = node_exporter(args.wrk_seconds)
    if yardstick is None:
        print("node_exporter: not installed (apt-get install prometheus-node-exporter), no yardstick")
    else:
        lat, series = yardstick
        for c, latency in lat.items():
            print(f"node_exporter ({series} series), {c:>2} scraper(s): p50 {latency.p50_ms:.2f} ms, "
                  f"p99 {latency.p99_ms:.2f} ms, {latency.requests_per_second:.0f} scrapes/s")


if __name__ == "__main__":
    main()
