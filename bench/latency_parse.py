"""What reading the latency histograms adds to one poll of an inference server (``bench/queues.py``).

Each preset's reader parses an exposition shaped like its server's (``tests/queue_fakes.py``: vLLM's
and SGLang's prometheus-client pages with their histograms, TGI's and Triton's as they print them,
plus the latency histograms ``tests/latency_servers.py`` writes), alternating two versions so the
reader never reuses the previous answer, with the preset as shipped and with its latency names left
out: the difference is the added cost per poll, in-process CPU time (thread time).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from latency_servers import ClientServer, TgiServer, TritonServer
from queue_fakes import SglangMetrics, VllmMetrics, tgi_metrics, triton_metrics

# bench/exporter.py would shadow the exporter package: import it from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if not hasattr(sys.modules.get("exporter"), "__path__"):
    sys.modules.pop("exporter", None)

from exporter.sources.queues.scrape import PRESETS, ExpositionReader, Preset

NO_LATENCY: dict[str, tuple[str, ...]] = {
    name: () for name in ("ttft", "itl", "e2e", "queue_time", "mean_e2e", "mean_queue", "mean_count")
}


def expositions(kind: str) -> tuple[str, str]:
    """Two versions of ``kind``'s page (the depth differs), with every latency histogram observed."""
    out = []
    for depth in (3, 4):
        if kind == "vllm":  # vLLM's page already holds its four latency histograms (19 buckets each)
            page = VllmMetrics()
            page.set([depth], [2])
            out.append(page.render().decode())
        elif kind == "sglang":
            page = SglangMetrics()
            page.set(depth, 3)
            server = ClientServer("sglang")
            for h in ("itl", "e2e", "queue"):
                server.observe(h, 0.05 * depth, 50)
            extra = "\n".join(
                line for line in server.render().decode().splitlines()
                if "time_to_first_token" not in line and "_reqs" not in line
            )  # fmt: skip
            out.append(page.render().decode() + extra + "\n")
        elif kind == "tgi":
            tgi = TgiServer()
            for h in ("itl", "e2e"):
                tgi.observe(h, 0.05 * depth, 50)
            text = tgi.render().decode()
            out.append(tgi_metrics(depth, 4).decode() + text.split("tgi_batch_current_size 5\n", 1)[1])
        else:
            triton = TritonServer(histograms=True)
            triton.observe("ttft", 0.05 * depth, 50)
            extra = "\n".join(
                line for line in triton.render().decode().splitlines()
                if "duration_us" in line or "first_response" in line
            )  # fmt: skip
            out.append(triton_metrics({"resnet50": depth, "bert-large": 0}).decode() + extra + "\n")
    return out[0], out[1]


def per_poll(preset: Preset, pages: tuple[str, str], polls: int) -> float:
    reader = ExpositionReader(preset, {})
    c0 = time.thread_time()
    for i in range(polls):
        reader.read(pages[i % 2], False)
    return (time.thread_time() - c0) / polls


def costs(polls: int = 400) -> list[tuple[str, float, float, int]]:
    """(kind, µs per poll with latency, µs without, latency lines kept) per inference server."""
    rows = []
    for kind in ("vllm", "sglang", "tgi", "triton"):
        pages = expositions(kind)
        full, bare = PRESETS[kind], dataclasses.replace(PRESETS[kind], **NO_LATENCY)
        names = full.read_names - bare.read_names
        kept = sum(1 for line in pages[0].splitlines() if line.split("{")[0].split(" ")[0] in names)
        per_poll(full, pages, 20)  # warm up
        rows.append((kind, per_poll(full, pages, polls) * 1e6, per_poll(bare, pages, polls) * 1e6, kept))
    return rows


def kv_pool_cost(polls: int = 400) -> tuple[float, float]:
    """(µs per vLLM poll reading its cache configuration into the KV-cache pool, µs without it), on
    vLLM's page with ``vllm:cache_config_info`` published as vLLM's loggers write it."""
    pages = []
    for depth in (3, 4):
        page = VllmMetrics()
        page.set([depth], [2])
        page.publish_cache_config(28724)
        pages.append(page.render().decode())
    pair = (pages[0], pages[1])
    full, bare = PRESETS["vllm"], dataclasses.replace(PRESETS["vllm"], cache_info=None)
    per_poll(full, pair, 20)
    return per_poll(full, pair, polls) * 1e6, per_poll(bare, pair, polls) * 1e6
