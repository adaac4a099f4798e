"""Optional subsystems are imported only when configured: an exporter on NVML with no pods, queues or
TLS never loads grpc (pod attribution), redis (Redis queues) or cryptography (TLS), nor what only
other paths need: prometheus-client (queue scrapes), importlib.metadata, the simulated fleet, and
what only a request for them needs: the status page's model and HTML writer, the patch writer.

The started process itself reports what it imported: CPython's ``PYTHONPROFILEIMPORTTIME`` makes it
write one ``import time:`` line per module it imports, at the moment it imports it, for its whole
life, so imports made after start-up (in a cycle, on a scrape) count too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from nvmldouble import NvmlDouble, exporter_args, gpu_values, scrape, value
from queue_fakes import VllmMetrics
from queue_servers import FakeHttpServer
from servers import exporter, http_get, wait_for

OPTIONAL = ("grpc", "redis", "cryptography", "google.protobuf", "prometheus_client")
NOT_ON_NVML = ("importlib.metadata", "exporter.sources.simulated", "exporter.sources.simulated.scenario")
ON_REQUEST = ("exporter.status.model", "exporter.status.page", "rightsizing.patches.build")


def imported(log: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)\s*$", log, re.M)}


def test_exporter_on_nvml_imports_no_optional_subsystem(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"gpus": 2, **gpu_values(0), **gpu_values(1)})
    env = {**nvml_double.env(), "PYTHONPROFILEIMPORTTIME": "1"}
    with exporter(exporter_args(tmp_path), env=env) as proc:
        wait_for(lambda: nvml_double.call_count("nvmlDeviceGetPowerUsage", 1) >= 5, 20, what="5 cycles")
        scrape(proc.url)
        modules = imported(proc.log())
    assert {"pynvml", "aiohttp", "exporter.sources.nvml.source"} <= modules  # the report works
    loaded = sorted(
        m for m in modules if m.split(".")[0] in OPTIONAL or m in OPTIONAL or m in NOT_ON_NVML + ON_REQUEST
    )
    assert loaded == [], f"imported without being configured: {loaded}"


def test_status_page_and_patches_load_on_their_first_request(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"gpus": 1, **gpu_values(0)})
    env = {**nvml_double.env(), "PYTHONPROFILEIMPORTTIME": "1"}
    with exporter(exporter_args(tmp_path), env=env) as proc:
        scrape(proc.url)
        assert not set(ON_REQUEST) & imported(proc.log())
        status, _, page = http_get(proc.url + "/")
        assert status == 200 and b"GPU-" in page  # the status page, rendered after the import
        status, _, body = http_get(proc.url + "/api/v1/patches")
        assert status == 200 and "patches" in json.loads(body)
        assert set(ON_REQUEST) <= imported(proc.log())


def test_exporter_maps_no_cplusplus_runtime(
    nvml_double: NvmlDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """frozenlist, under aiohttp's signals, ships a C++ build that loads libstdc++ (about 1 MiB of
    resident pages); the exporter runs frozenlist's pure-Python FrozenList instead."""
    monkeypatch.delenv("FROZENLIST_NO_EXTENSIONS", raising=False)  # the exporter's choice, not inherited
    nvml_double.set({"gpus": 1, **gpu_values(0)})
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        scrape(proc.url)
        maps = Path(f"/proc/{proc.proc.pid}/maps").read_text()
    assert "/libnvidia-ml.so.1" in maps  # the maps of the exporter on the double
    assert "libstdc++" not in maps


def test_http_queues_alone_load_no_redis(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    """A vLLM queue is polled and published; redis-py, needed by Redis sources only, stays unloaded."""
    nvml_double.set({"gpus": 1, **gpu_values(0)})
    vllm = VllmMetrics()
    vllm.set([4], [2])
    with FakeHttpServer() as srv:
        srv.route("/metrics", body=vllm.render)
        args = exporter_args(tmp_path)
        config = Path(args[1])
        queue = {"name": "chat", "kind": "vllm", "url": srv.url("/metrics"), "backoff_max": 1}
        config.write_text(config.read_text() + yaml.safe_dump({"queues": [queue]}))
        env = {**nvml_double.env(), "PYTHONPROFILEIMPORTTIME": "1"}
        with exporter(args, env=env) as proc:
            depth = lambda: value(scrape(proc.url), "rightsizer_queue_depth", queue="chat")  # noqa: E731
            wait_for(lambda: depth() == 4, 15, what="depth 4")
            modules = imported(proc.log())
    assert "exporter.sources.queues.manager" in modules  # the queue extension ran
    assert sorted(m for m in modules if m.split(".")[0] == "redis") == []
