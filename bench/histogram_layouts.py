"""/healthz while a vLLM page's TTFT histogram of 10,000 bounds changes its layout every poll.

A lean HTTP server (a child process, so its CPU is not the exporter's) answers the exporter's polls
with one of two pages in turn: the same 10,000 bounds but the last finite one (1,000 s, then
1,500 s), counts growing a little at every poll. The exporter polls it every second with a TTFT SLO
declared (``max_series`` raised to hold the page). Meanwhile this script asks ``/healthz`` every
20 ms over a keep-alive connection (5 s timeout) and prints the percentiles.

Merging two layouts used to be quadratic in the bounds (every bound compared with every other): at
10,000 bounds each poll blocked the event loop for seconds. Run it from a checkout of any version:

    .venv/bin/python bench/histogram_layouts.py [--bounds 10000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from common import cpu_seconds
from servers import exporter, http_get, wait_for

TTFT = "vllm:time_to_first_token_seconds"
LABELS = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'


def page(bounds: int, last: float, poll: int) -> bytes:
    """``bounds`` finite bounds 0.1 s apart (the last one ``last``), 10 requests a poll, all under
    1 s except one in ten, cumulative since the start."""
    les = [0.1 * k for k in range(1, bounds)] + [last]
    total = 10 * poll
    fast = 9 * poll  # at or under 0.5 s
    lines = [f"vllm:num_requests_waiting{{{LABELS}}} 4", f"# TYPE {TTFT} histogram"]
    for le in les:
        n = fast if le <= 0.5 else (fast if le < 2.0 else total)
        lines.append(f'{TTFT}_bucket{{{LABELS},le="{le:.1f}"}} {n}')
    lines.append(f'{TTFT}_bucket{{{LABELS},le="+Inf"}} {total}')
    lines.append(f"{TTFT}_sum{{{LABELS}}} {0.3 * fast + 3.0 * (total - fast):.1f}")
    lines.append(f"{TTFT}_count{{{LABELS}}} {total}")
    return ("\n".join(lines) + "\n").encode()


def serve(bounds: int, port: multiprocessing.Queue) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    polls = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            polls[0] += 1
            n = polls[0]
            body = page(bounds, 1000.0 if n % 2 else 1500.0, n)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port.put(server.server_address[1])
    server.serve_forever()


def probe(url: str, seconds: float) -> tuple[list[float], int]:
    """/healthz latencies (ms) every 20 ms for ``seconds``; a timeout (5 s) counts as 5,000 ms."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=5)
    out: list[float] = []
    timeouts = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            out.append((time.perf_counter() - started) * 1000)
        except (TimeoutError, OSError, http.client.HTTPException):
            timeouts += 1
            out.append(5000.0)
            conn.close()
            conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=5)
        time.sleep(0.02)
    return out, timeouts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--bounds", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    ports: multiprocessing.Queue = multiprocessing.Queue()
    child = multiprocessing.Process(target=serve, args=(args.bounds, ports), daemon=True)
    child.start()
    port = ports.get(timeout=30)
    size = len(page(args.bounds, 1000.0, 1))
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "exporter.yaml"
        config.write_text(yaml.safe_dump({
            "queues": [{"name": "chat", "kind": "vllm", "url": f"http://127.0.0.1:{port}/metrics",
                        "max_series": args.bounds + 100, "labels": {"namespace": "llm", "workload": "chat"}}],
            "slos": [{"namespace": "llm", "workload": "chat", "ttft_seconds": 0.5}],
        }))  # fmt: skip
        with exporter(["--simulate", "--interval", "1", "--config", str(config)]) as p:
            wait_for(lambda: b'rightsizer_queue_source_up{' in http_get(p.url + "/metrics", timeout=30)[2],
                     60, what="the queue polled")  # fmt: skip
            cpu0 = cpu_seconds(p.proc.pid)
            times, timeouts = probe(p.url, args.seconds)
            cpu = (cpu_seconds(p.proc.pid) - cpu0) / args.seconds
            try:
                metrics = http_get(p.url + "/metrics", timeout=30)[2].decode()
            except TimeoutError:
                metrics = "(/metrics did not answer within 30 s)"
    child.terminate()
    times.sort()
    q = statistics.quantiles(times, n=100, method="inclusive")
    lines = metrics.splitlines()
    up = next((ln for ln in lines if ln.startswith("rightsizer_queue_source_up{")), metrics[:60])
    judged = next((ln for ln in lines if ln.startswith("rightsizer_workload_slo_scaling_up{")), "?")
    print(f"page: {args.bounds} bounds ({size / 1e6:.2f} MB), last bound alternating every poll")
    print(
        f"/healthz over {args.seconds:.0f} s: {len(times)} probes, p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, "
        f"max {times[-1]:.1f} ms, over 50 ms: {sum(t > 50 for t in times)}, timeouts (5 s): {timeouts}"
    )
    print(f"exporter CPU: {cpu:.0%} of one core")
    print(f"{up}\n{judged}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
