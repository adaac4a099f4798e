"""dcgm-exporter's page read for its profiling ratios: real pages users published (tests/fixtures/dcgm,
each citing its source), matched to this node's GPUs and MIG instances by UUID, and hostile or
broken answers refused whole (a down source, never a 0)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from exporter.sources.dcgm.extension import merge
from exporter.sources.dcgm.page import PageScan, read_page
from exporter.sources.queues.base import QueueSourceError
from rightsizer_core.snapshot import GpuIdentity, GpuSample

PAGES = Path(__file__).parent / "fixtures" / "dcgm"
A30_0 = "GPU-265c9814-6156-355b-e589-ff2064894f16"
A30_1 = "GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49"


def page(name: str) -> str:
    return (PAGES / name).read_text()


def gpu(
    uuid: str, fields: dict[str, float] | None = None, unsupported: frozenset[str] = frozenset()
) -> GpuSample:
    ident = GpuIdentity(0, uuid, "00000000:1A:00.0", "NVIDIA A30", 0, "550.54.15", 24 << 30)
    return GpuSample(ident, True, fields or {}, unsupported)


def mig(parent: str, instance: int, profile: str) -> GpuSample:
    ident = GpuIdentity(
        0, f"MIG-{parent[4:12]}-{instance}", "00000000:1A:00.0", f"NVIDIA A30 MIG {profile}", 0, "550.54.15",
        6 << 30, profile, instance, parent,
    )  # fmt: skip
    return GpuSample(ident, True, {"memory_used_bytes": 1.0})


def test_a_mig_page_is_read_per_gpu_instance_under_the_parent_uuid() -> None:
    got = read_page(page("a30-mig.prom"))
    assert set(got.values) == {(A30_0, "3"), (A30_0, "4"), (A30_1, "3")}
    assert got.values[(A30_0, "3")] == {
        "gr_engine_active_ratio": 0.0,
        "sm_active_ratio": 0.0,
        "dram_active_ratio": 0.0,
    }
    assert got.series == 9 and got.rejected == ()


def test_pod_labels_and_real_values_are_read() -> None:
    got = read_page(page("a30-mig-pods.prom"))
    assert got.values == {
        ("GPU-603a8873-0edd-c157-ce48-2078e8b1a935", "1"): {
            "gr_engine_active_ratio": 0.381124,
            "tensor_active_ratio": 0.022137,
        }
    }


def test_newer_labels_pci_bus_id_and_driver_version_do_not_matter() -> None:
    got = read_page(page("h100-mig-pods.prom"))
    uuid = "GPU-58e8f5ea-13cc-013a-d88f-2bcf5ae8bc77"
    assert sorted(got.values) == [(uuid, "7"), (uuid, "8"), (uuid, "9")]


def test_legacy_page_without_model_name_gives_pcie_rates_and_ignores_fp_pipes() -> None:
    got = read_page(page("legacy-no-model.prom"))
    assert got.values == {
        ("GPU-45984919-9e67-f2ec-9b84-a96fefa525ff", None): {
            "dram_active_ratio": 0.0,
            "pcie_tx_bytes_per_second": 0.0,
            "pcie_rx_bytes_per_second": 0.0,
        }
    }


def test_1x_compatible_names_and_uuid_label_are_read() -> None:
    got = read_page(page("a100-mig-1x-names.prom"))
    assert got.values[("GPU-ed1353d6-52ba-8793-7230-4d5d3eb68167", "2")] == {"gr_engine_active_ratio": 0.0}
    assert len(got.values) == 3


def test_a_page_without_profiling_fields_is_up_with_nothing_to_use() -> None:
    got = read_page(page("t4-pods-no-dcp.prom"))
    assert got.values == {} and got.series == 0


def test_merge_fills_only_what_nvml_lacks_and_matches_mig_by_parent_and_instance() -> None:
    values = read_page(page("a30-mig-pods.prom")).values
    parent = "GPU-603a8873-0edd-c157-ce48-2078e8b1a935"
    # GPM (NVML) reported GR engine active 0.5 on the whole GPU: it stays; the page adds tensor.
    whole = gpu(
        parent, {"gr_engine_active_ratio": 0.5}, frozenset({"tensor_active_ratio", "sm_active_ratio"})
    )
    merged, matched = merge(
        (whole,), {(parent, None): {"gr_engine_active_ratio": 0.1, "tensor_active_ratio": 0.2}}
    )
    assert merged[0].fields == {"gr_engine_active_ratio": 0.5, "tensor_active_ratio": 0.2}
    assert merged[0].unsupported == {"sm_active_ratio"}
    assert matched == [{"uuid": parent, "fields": ["tensor_active_ratio"]}]
    # The instance with GPU_I_ID 1 gets the page's values; instance 2 and another GPU get nothing.
    one, two, other = mig(parent, 1, "2g.12gb"), mig(parent, 2, "2g.12gb"), gpu(A30_0)
    merged, matched = merge((one, two, other), values)
    assert merged[0].fields["gr_engine_active_ratio"] == 0.381124
    assert "gr_engine_active_ratio" not in merged[1].fields and merged[2] is other
    assert [m["uuid"] for m in matched] == [one.identity.uuid]


def test_a_gpu_down_this_cycle_gets_no_values() -> None:
    down = GpuSample(gpu(A30_0).identity, False)
    merged, matched = merge((down,), {(A30_0, None): {"sm_active_ratio": 0.4}})
    assert merged == (down,) and matched == []


LINE = 'DCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="{uuid}",device="nvidia0",modelName="NVIDIA L4"}} {value}\n'


@pytest.mark.parametrize(
    ("value", "why"),
    [("1.350000", "above 1"), ("-0.100000", "negative"), ("NaN", "not a number"), ("+Inf", "not a number")],
)
def test_out_of_range_values_are_left_out_and_named(value: str, why: str) -> None:
    text = LINE.format(uuid="GPU-a", value=value) + LINE.format(uuid="GPU-b", value="0.25")
    got = read_page(text)
    assert got.values == {("GPU-b", None): {"sm_active_ratio": 0.25}}
    assert len(got.rejected) == 1 and why in got.rejected[0] and "GPU-a" in got.rejected[0]


def test_a_gpu_shared_by_pods_has_one_value() -> None:
    line = (
        'DCGM_FI_PROF_DRAM_ACTIVE{{gpu="0",UUID="GPU-a",pod="{pod}",namespace="ns",container="c"}} 0.420000\n'
    )
    got = read_page(line.format(pod="p1") + line.format(pod="p2"))
    assert got.values == {("GPU-a", None): {"dram_active_ratio": 0.42}}
    assert math.isclose(got.values[("GPU-a", None)]["dram_active_ratio"], 0.42)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<html><body>Login</body></html>\n", "not a dcgm-exporter page"),
        ("node_cpu_seconds_total 1\n", "not a dcgm-exporter page"),
        ('DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a" 0.5\n', "cannot parse"),
        ('DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a"} N/A\n', "cannot parse"),
    ],
)
def test_junk_is_refused_whole(text: str, message: str) -> None:
    with pytest.raises(QueueSourceError, match=message):
        read_page(text)


def test_bounds_refuse_the_answer_not_part_of_it() -> None:
    many = "".join(LINE.format(uuid=f"GPU-{i}", value="0.1") for i in range(20))
    with pytest.raises(QueueSourceError, match="more than 10 series"):
        read_page(many, max_series=10)
    long = LINE.format(uuid="GPU-" + "x" * 5000, value="0.1")
    with pytest.raises(QueueSourceError, match="longer than 4096 bytes"):
        read_page(long, max_series_bytes=4096)
    # A long line of a field nobody reads costs nothing.
    other = 'DCGM_FI_DEV_GPU_TEMP{UUID="' + "y" * 50_000 + '"} 40\n'
    assert read_page(other + LINE.format(uuid="GPU-a", value="0.5")).values == {
        ("GPU-a", None): {"sm_active_ratio": 0.5}
    }


def test_invalid_utf8_is_refused() -> None:
    scan = PageScan(False, 10, 4096)
    scan.feed(LINE.format(uuid="GPU-a", value="0.5").encode())
    with pytest.raises(QueueSourceError, match="not UTF-8"):
        scan.feed(b"\xff\xfe\n")
