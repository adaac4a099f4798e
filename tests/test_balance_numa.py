"""System balance: a GPU whose container may run on no CPU of the GPU's NUMA node is flagged
(``numa_mismatch``) with its evidence: the GPU's node, that node's CPUs and the container's
cpuset. Through the simulated fleet's scenario, the fixture /sys and cgroup trees behind pod
attribution, and NVML's answer from the C double in a real exporter process."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html import unescape as html_unescape
from pathlib import Path
from typing import Any

import yaml
from nvmldouble import NvmlDouble, api_gpus, gpu_values, scrape_until, value
from pods_fake_kubelet import kubelet_process, short_socket_dir, write_answer
from pods_rig import PROC, Rig, checkpoint, kubelet, pods_answer, rig, start  # noqa: F401  (fixtures)
from report_history import exporter_history, prometheus_with_history
from servers import exporter

from exporter.render import Renderer
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sampler import Sampler
from exporter.server import create_app
from exporter.sources.pods.cgroup import read_cgroup
from exporter.sources.pods.extension import PodAttribution
from exporter.sources.pods.numa import cgroup_cpus, node_cpus, sysfs_bus_id, sysfs_gpu_node
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizing.balance import findings
from rightsizing.catalog import load_catalog
from rightsizing.numa import NumaPlacement, format_cpulist, parse_cpulist
from rightsizing.settings import RightsizingSettings

FIXTURES = Path(__file__).parent / "fixtures"
SYS, CGROUP = FIXTURES / "sys", FIXTURES / "cgroup"
SCENARIO = Path(__file__).parent / "scenarios" / "balance" / "numa_cross_socket.yaml"
FINDING = "rightsizer_gpu_balance_finding"


def test_cpu_lists_read_as_the_kernel_writes_them() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert parse_cpulist("") == frozenset()  # a memory-only node
    for bad in ("0-", "a", "3-1", "0-99999999", "1,,2"):
        assert parse_cpulist(bad) is None, bad
    assert format_cpulist(frozenset({0, 1, 2, 3, 8, 10, 11})) == "0-3,8,10-11"
    assert sysfs_bus_id("00000000:1A:00.0") == "0000:1a:00.0"


def test_the_fixture_trees_give_each_part() -> None:
    assert node_cpus(str(SYS), 1) == parse_cpulist("8-15,24-31")
    assert node_cpus(str(SYS), 7) is None  # no such node: unknown, not empty
    assert sysfs_gpu_node(str(SYS), "00000000:11:00.0") == 1
    assert sysfs_gpu_node(str(SYS), "00000000:99:00.0") is None
    v1, v2 = read_cgroup(PROC, 1001), read_cgroup(PROC, 1003)
    assert v1 is not None and v1.cpuset_path is not None and not v1.unified
    assert v2 is not None and v2.cpuset_path is not None and v2.unified
    assert cgroup_cpus(str(CGROUP), v1.cpuset_path, v1.unified) == frozenset(range(4))
    assert cgroup_cpus(str(CGROUP), v2.cpuset_path, v2.unified) == frozenset(range(8, 12))
    assert cgroup_cpus(str(CGROUP), "/../../kubepods/x", True) is None  # another cgroup namespace


def test_a_cross_numa_container_is_flagged_and_a_partly_local_one_is_not() -> None:
    node1 = parse_cpulist("8-15,24-31")
    remote = NumaPlacement(1, node1, frozenset(range(4)), "ml/train/trainer")
    assert remote.mismatch is True
    assert NumaPlacement(1, node1, frozenset({7, 8}), "a/b/c").mismatch is False  # CPU 8 is local
    assert NumaPlacement(-1, None, frozenset(range(4))).mismatch is None  # no NUMA info
    assert NumaPlacement(1, node1, None).mismatch is None  # cpuset unknown


def test_the_scenario_flags_the_remote_pod_with_its_evidence() -> None:
    fleet = exporter_history(SCENARIO, 3600.0, 15.0, {}, None)
    gpus = {g.name: g.uuid for g in fleet.source.scenario.gpus}
    reading = fleet.source.reading_at(fleet.last)
    contribution = fleet.live.contribute(reading, reading.gpus)
    numa = {
        r.gpu.identity.uuid: r.value
        for r in contribution.rows[FINDING]
        if r.gpu and dict(r.labels)["finding"] == "numa_mismatch"
    }
    # Unknown (no NUMA info, no cpuset) publishes nothing; judged GPUs publish 1 or 0.
    assert numa == {gpus["local"]: 0.0, gpus["remote"]: 1.0, gpus["straddling"]: 0.0}
    entry = contribution.api["gpus"][gpus["remote"]]["rightsizing"]
    (finding,) = entry["findings"]
    assert finding["finding"] == "numa_mismatch"
    assert "NUMA node 1 (CPUs 32-63)" in finding["evidence"]
    assert "llm/chat-remote-4d5f6-gghjk/vllm may run only on CPUs 8-15" in finding["evidence"]
    assert entry["numa"] == {
        "gpu_node": 1, "node_cpus": "32-63", "container": "llm/chat-remote-4d5f6-gghjk/vllm",
        "container_cpus": "8-15", "mismatch": True,
    }  # fmt: skip
    for name in ("local", "straddling", "no-numa-info", "no-cpuset"):
        assert contribution.api["gpus"][gpus[name]]["rightsizing"]["findings"] == [], name


async def test_pod_attribution_reads_the_placement_from_the_fixture_trees(
    rig: Rig,  # noqa: F811
    kubelet: object,  # noqa: F811
) -> None:
    """FakeSource reports no NUMA node (as a driver without nvmlDeviceGetNumaNodeId): the kernel's
    answer is read. GPU 1 (ml/train, pid 1001) sits on node 1, its container on CPUs 0-3 of node 0;
    GPU 0 is shared by two containers and GPU 2 is free: neither is judged."""
    pods = PodAttribution(
        rig.settings(sysfs_root=str(SYS), cgroup_root=str(CGROUP)), rig.source.running_processes
    )
    engine = RightsizingExtension(
        RightsizingSettings(min_samples=1, min_history_seconds=0), load_catalog(), 1.0, object(),
        placements=pods.numa_placements,
    )  # fmt: skip
    sampler = await start(rig, pods)
    try:
        await sampler.cycle()
        await pods.refresh()
        placements = pods.numa_placements()
        assert set(placements) == {rig.uuids[1]}
        train = placements[rig.uuids[1]]
        assert train == NumaPlacement(1, parse_cpulist("8-15,24-31"), frozenset(range(4)), "ml/train/trainer")
        reading = await rig.source.collect()
        contribution = engine.contribute(reading, reading.gpus)
        (finding,) = findings(engine.evidence[rig.uuids[1]])
        assert finding.name == "numa_mismatch" and "CPUs 0-3" in finding.evidence
        rows = [r for r in contribution.rows[FINDING] if dict(r.labels)["finding"] == "numa_mismatch"]
        assert [(r.gpu.identity.uuid if r.gpu else None, r.value) for r in rows] == [(rig.uuids[1], 1.0)]
    finally:
        await sampler.stop()


def test_nvml_numa_node_from_the_double_wins_over_sysfs(nvml_double: NvmlDouble) -> None:
    """The exporter on NVML (the C double) with pod attribution from a fake kubelet: NVML says GPU 1
    is on node 1 (the fixture sysfs says node 0, so only NVML's answer flags it); its container
    (ml/train, pid 1001) may run on CPUs 0-3 of node 0. GPU 2 answers -1 (no NUMA information)."""
    nvml_double.set({"gpus": 3, **gpu_values(0), **gpu_values(1, numa_node=1), **gpu_values(2, numa_node=-1)})
    uuids = [str(gpu_values(i)[f"gpu.{i}.uuid"]) for i in range(3)]
    nvml_double.gpu(0, processes=f"1003:{2**31},1004:{2**30}")  # chat-a, chat-b: shared
    nvml_double.gpu(1, processes=f"1001:{7 * 2**30}")  # train
    nvml_double.gpu(2, processes="")
    d = short_socket_dir()
    try:
        write_answer(d / "answer.json", pods_answer(uuids))
        (d / "kubelet_internal_checkpoint").write_text(checkpoint(uuids))
        settings = {
            "interval": 0.2,
            "nvml": {"call_timeout_seconds": 0.5, "slow_interval_seconds": 1, "init_timeout_seconds": 5},
            "pods": {
                "enabled": True, "socket": str(d / "kubelet.sock"), "refresh_interval_seconds": 1,
                "timeout_seconds": 0.5, "procfs_root": str(PROC), "sysfs_root": str(SYS),
                "cgroup_root": str(CGROUP), "checkpoint": str(d / "kubelet_internal_checkpoint"),
            },
            "rightsizing": {"min_samples": 1, "min_history_seconds": 0},
        }  # fmt: skip
        (d / "exporter.yaml").write_text(yaml.safe_dump(settings))
        with (
            kubelet_process(d / "kubelet.sock", d / "answer.json"),
            exporter(["--config", str(d / "exporter.yaml")], env=nvml_double.env()) as proc,
        ):
            samples = scrape_until(
                proc.url,
                lambda s: value(s, FINDING, UUID=uuids[1], finding="numa_mismatch") is not None,
                "the NUMA check of GPU 1",
            )
            assert value(samples, FINDING, UUID=uuids[1], finding="numa_mismatch") == 1
            for u in (uuids[0], uuids[2]):  # shared by two containers; no NUMA information
                assert value(samples, FINDING, UUID=u, finding="numa_mismatch") is None
            api = api_gpus(proc.url)
            numa = [f for f in api[uuids[1]]["rightsizing"]["findings"] if f["finding"] == "numa_mismatch"]
            assert len(numa) == 1
            assert "NUMA node 1 (CPUs 8-15,24-31)" in numa[0]["evidence"]
            assert "ml/train/trainer may run only on CPUs 0-3" in numa[0]["evidence"]
            log = proc.log()
        assert "Traceback" not in log
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_the_report_shows_what_the_exporter_flagged() -> None:
    """``rightsizer report`` cannot see cpusets in Prometheus; it reads the exporter's finding series
    over the window and names the same GPU as the live engine."""
    with prometheus_with_history([SCENARIO], 3600.0, 15.0) as (url, fleets):
        (fleet,) = fleets
        at = fleet.last + 1
        cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
               "--window", "1h", "--at", f"{at:.3f}", "--format", "json"]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    names = {g.uuid: g.name for g in fleet.source.scenario.gpus}
    report = {names[g["uuid"]]: g["findings"] for g in json.loads(out.stdout)["gpus"]}
    live = {
        names[u]: [f.name for f in findings(fleet.live.evidence[u])]
        for u in names
        if u in fleet.live.evidence
    }
    assert report == live
    assert report["remote"] == ["numa_mismatch"]
    assert all(report[n] == [] for n in report if n != "remote")


async def test_the_status_page_tags_the_remote_gpu(aiohttp_client: Any) -> None:
    source = SimulatedSource(load_scenario(str(SCENARIO)))
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), 1.0, source)
    sampler = Sampler(source, Renderer(), interval=3600, hostname="node-a", extensions=[ext])
    await sampler.start()
    try:
        client = await aiohttp_client(create_app(sampler))
        html = await (await client.get("/")).text()
    finally:
        await sampler.stop()
    uuids = {g.name: g.uuid for g in source.scenario.gpus}
    rows = {
        name: re.search(rf'<tr class="gpu" data-uuid="{u}".*?</tr>', html, re.S) for name, u in uuids.items()
    }
    tag = re.compile(r'<span class="tag finding" title="([^"]*)">numa mismatch</span>')
    found = {name: tag.findall(m.group(0)) if m else None for name, m in rows.items()}
    assert [n for n, tags in found.items() if tags] == ["remote"]
    assert "NUMA node 1 (CPUs 32-63)" in html_unescape(found["remote"][0])
