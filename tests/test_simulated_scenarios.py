"""The simulated fleet's scenario files: built-ins, replication, and errors naming file, GPU and key."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from servers import ROOT

from exporter.sources.simulated.source import SimulatedSource, builtin_names, load_scenario
from rightsizer_core.settings import ConfigError

START = "2025-06-01T12:00:00Z"
T0 = 1748779200.0  # START as Unix time
GIB = 2**30


def write(tmp_path: Path, gpus: list[dict[str, Any]], **top: Any) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"seed": 3, "start": START, **top, "gpus": gpus}))
    return path


def source(tmp_path: Path, gpus: list[dict[str, Any]], **top: Any) -> SimulatedSource:
    return SimulatedSource(load_scenario(str(write(tmp_path, gpus, **top))))


# --- scenarios -------------------------------------------------------------------------------------
def test_builtin_scenarios_load_and_default_expects_every_verdict() -> None:
    assert {"default", "golden", "large64"} <= set(builtin_names())
    default = load_scenario("default")
    assert len(default.gpus) == 8 and len({g.spec.key for g in default.gpus}) >= 5
    assert all(g.expect is not None for g in default.gpus)
    verdicts = {g.expect.verdict for g in default.gpus if g.expect}
    assert verdicts == {"idle", "overprovisioned", "rightsized", "underprovisioned", "insufficient_data"}
    bottlenecks = {b for g in default.gpus if g.expect for b in g.expect.bottlenecks}
    assert {"memory_capacity", "memory_bandwidth", "launch_overhead", "data_loading"} <= bottlenecks
    golden = load_scenario("golden")
    assert golden.frozen and golden.start == T0
    large = load_scenario("large64")
    assert len(large.gpus) == 64 and len({g.uuid for g in large.gpus}) == 64
    assert len({g.pci_bus_id for g in large.gpus}) == 64


def test_count_replicates_with_own_identity_pod_and_queue(tmp_path: Path) -> None:
    src = source(
        tmp_path,
        [
            {
                "model": "L4",
                "count": 3,
                "workload": {"kind": "steady_inference"},
                "pod": {"pod": "chat", "namespace": "llm"},
                "queue": {"name": "q", "labels": {"a": "b"}},
            },
            {
                "model": "NVIDIA H100 80GB HBM3",
                "uuid": "GPU-fixed",
                "pci_bus_id": "00000000:99:00.0",
                "workload": {"kind": "idle"},
            },
        ],
    )
    gpus = src.reading_at(T0).gpus
    assert [g.identity.index for g in gpus] == [0, 1, 2, 3]
    assert [g.identity.model for g in gpus] == ["NVIDIA L4"] * 3 + ["NVIDIA H100 80GB HBM3"]
    assert len({g.identity.uuid for g in gpus}) == 4 and gpus[3].identity.uuid == "GPU-fixed"
    assert gpus[3].identity.pci_bus_id == "00000000:99:00.0"
    assert [g.pod.pod for g in gpus[:3] if g.pod] == ["chat-0", "chat-1", "chat-2"]
    # What NVML reports for an L4 (ECC on): 23034 MiB, not the nominal 24 GiB.
    assert gpus[0].identity.memory_total_bytes == 23034 * 2**20
    assert gpus[3].identity.memory_total_bytes == 81559 * 2**20
    queues = src.queue_samples(T0)
    assert [q.name for q in queues] == ["q-0", "q-1", "q-2"]
    assert [q.gpus for q in queues] == [(g.identity.uuid,) for g in gpus[:3]]
    assert queues[0].labels == {"a": "b"} and queues[0].gpu_uuid == gpus[0].identity.uuid


TRAIN_20GIB = {"kind": "training", "memory_gib": 20}
BAD = [
    ({"gpus": [{"model": "L4", "workload": {"kind": "idle"}}], "sed": 1}, "unknown key 'sed'"),
    (
        {"gpus": [{"model": "L4", "colour": 1, "workload": {"kind": "idle"}}]},
        "gpus[0] (L4): unknown key 'colour'",
    ),
    ({"gpus": [{"model": "V100", "workload": {"kind": "idle"}}]}, "gpus[0] (V100).model: unknown GPU 'V100'"),
    (
        {"gpus": [{"model": "L4", "workload": {"kind": "mining"}}]},
        "gpus[0] (L4).workload.kind: must be one of",
    ),
    (
        {"gpus": [{"model": "L4", "workload": {"kind": "idle", "gap_fraction": 0.2}}]},
        "gpus[0] (L4).workload.gap_fraction: does not apply to kind 'idle'",
    ),
    (
        {"gpus": [{"model": "L4", "workload": {"kind": "training", "memory_gib": 30}}]},
        "gpus[0] (L4).workload.memory_gib: 30 GiB is more than the L4-24GB's 22.49 GiB usable",
    ),
    (
        {"gpus": [{"model": "L4", "workload": {"kind": "steady_inference", "activity": 2}}]},
        "gpus[0] (L4).workload.activity: must be at most 1",
    ),
    ({"gpus": [{"model": "L4"}]}, "gpus[0] (L4).workload: a workload with a kind is required"),
    (
        {
            "gpus": [
                {"name": "x", "model": "L4", "workload": {"kind": "idle"}, "expect": {"verdict": "great"}}
            ]
        },
        "gpus[0] (x).expect.verdict: must be one of idle",
    ),
    (
        {"gpus": [{"model": "L4", "workload": {"kind": "idle"}, "expect": {"recommended": "L5"}}]},
        "gpus[0] (L4).expect.recommended: 'L5' is not a catalog GPU",
    ),
    (
        {"gpus": [{"model": "L4", "workload": {"kind": "idle"}}], "start": "noon"},
        "start: must be an RFC 3339",
    ),
    ({"gpus": []}, "gpus: at least one GPU is required"),
    (
        {"gpus": [{"model": "L4", "mig": [{"profile": "1g.10gb", "workload": {"kind": "idle"}}]}]},
        "gpus[0] (L4).mig[0].profile: '1g.10gb' is not a MIG profile of L4-24GB (none: it has no MIG)",
    ),
    (
        {
            "gpus": [
                {"model": "H100-SXM-80GB", "mig": [{"profile": "4g.40gb", "workload": {"kind": "idle"}}] * 2}
            ]
        },
        "gpus[0] (H100-SXM-80GB).mig[1]: the instances do not fit one H100-SXM-80GB",
    ),
    (
        {"gpus": [{"model": "H100-SXM-80GB", "mig": [{"profile": "1g.10gb", "workload": TRAIN_20GIB}]}]},
        "gpus[0] (H100-SXM-80GB).mig[0].workload.memory_gib: 20 GiB is more than the H100-SXM-80GB/1g.10gb's",
    ),
    (
        {"gpus": [{"model": "H100-SXM-80GB", "workload": {"kind": "idle"}, "mig": [{"profile": "1g.10gb"}]}]},
        "gpus[0] (H100-SXM-80GB): in MIG mode the workloads belong to the instances",
    ),
    (  # "3" is never in a generated suffix: the workload is "chat-2b3c4", which the report links
        {
            "gpus": [
                {
                    "model": "L4",
                    "workload": {"kind": "idle"},
                    "pod": {"pod": "chat-2b3c4-qrstv", "namespace": "llm"},
                    "queue": {"name": "q", "labels": {"namespace": "llm", "workload": "chat"}},
                }
            ]
        },
        "gpus[0] (L4).queue.labels.workload: 'chat' is not the workload of pod 'chat-2b3c4-qrstv', "
        "'chat-2b3c4'",
    ),
    (
        {
            "gpus": [
                {
                    "model": "H100-SXM-80GB",
                    "mig": [
                        {"profile": "1g.10gb", "workload": {"kind": "idle"}},
                        {
                            "profile": "1g.10gb",
                            "workload": {"kind": "idle"},
                            "pod": {"pod": "ocr-7b8c9-qrstv"},
                            "queue": {"name": "q", "labels": {"namespace": "docs", "workload": "ocr"}},
                        },
                    ],
                }
            ]
        },
        "gpus[0] (H100-SXM-80GB).mig[1].queue.labels.namespace: 'docs' is not the namespace of pod "
        "'ocr-7b8c9-qrstv', 'default'",
    ),
    (
        {
            "gpus": [
                {"model": "L4", "uuid": "GPU-1", "workload": {"kind": "idle"}},
                {"model": "T4", "uuid": "GPU-1", "workload": {"kind": "idle"}},
            ]
        },
        "uuid 'GPU-1' is used by both",
    ),
]


@pytest.mark.parametrize(("data", "message"), BAD)
def test_bad_scenario_names_file_gpu_and_key(tmp_path: Path, data: dict[str, Any], message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as info:
        load_scenario(str(path))
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text and ": :" not in text, text


def test_bad_yaml_missing_file_and_unknown_builtin(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("gpus: [\n  - model: L4\n   workload: {kind: idle\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: not valid YAML at line"):
        load_scenario(str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenario(str(tmp_path / "absent.yaml"))
    with pytest.raises(
        ConfigError, match=r"scenario 'nosuch': no such built-in scenario \(built-in: default"
    ):
        load_scenario("nosuch")


def test_cli_reports_a_bad_scenario_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, [{"model": "L4", "workload": {"kind": "idle", "speed": 2}}])
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "--simulate", str(path), "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"rightsizer-exporter: {path}: gpus[0] (L4).workload: unknown key 'speed'")


def test_docs_describe_every_kind_parameter_and_builtin() -> None:
    from exporter.sources.simulated.scenario import WorkloadEntry
    from exporter.sources.simulated.workloads import COMMON, KINDS, parameters_of

    text = (ROOT / "docs" / "scenarios.md").read_text()
    rows = {line.split("`")[1]: line for line in text.splitlines() if line.startswith("| `")}
    for kind in KINDS:
        for name, default in parameters_of(kind).items():
            if name in COMMON and COMMON[name] == default:
                assert f"| `{name}` | `{default:g}` |" in text, name
            else:  # the kind's row lists it with its default
                assert f"`{name}` {default:g}" in rows[kind], (kind, name)
    for field in WorkloadEntry.__dataclass_fields__:
        assert f"`{field}`" in text, field
    for name in builtin_names():
        assert f"| `{name}` |" in text, name
    for gpu in load_scenario("default").gpus:
        assert f"`{gpu.name}`" in text and gpu.expect is not None
        assert gpu.expect.verdict is not None and gpu.expect.verdict in text
