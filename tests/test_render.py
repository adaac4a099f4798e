"""The renderer: both exposition formats parse with prometheus-client, units convert, labels follow
dcgm-exporter, down GPUs keep only rightsizer_gpu_up, and own families lint clean with promtool."""

from __future__ import annotations

import gzip
import subprocess
from dataclasses import replace

import pytest
from fakes import H100, FakeSource, fields, identity
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text
from servers import require_binary

from exporter import render
from exporter.metrics import FAMILIES, MIB, PROMTOOL_EXCEPTIONS, Family
from exporter.render import Renderer, format_value
from rightsizer_core.snapshot import CollectorStatus, GpuSample, PodRef, Row, Snapshot


def snapshot(samples: list[GpuSample], **kw: object) -> Snapshot:
    return Snapshot(1_700_000_123.5, "node-a", tuple(samples), (CollectorStatus("nvml", True, 0.0125),), **kw)  # type: ignore[arg-type]


def samples_by_name(text: str) -> dict[str, list]:
    """Samples by the name written on the line (prometheus-client's text parser appends _total to
    counter samples; Prometheus itself keeps the name as written)."""
    out: dict[str, list] = {}
    for fam in parse_text(text):
        for s in fam.samples:
            name = (
                s.name.removesuffix("_total")
                if fam.type == "counter"
                and fam.name + "_total" == s.name
                and not fam.name.startswith("rightsizer_")
                else s.name
            )
            out.setdefault(name, []).append(s)
    return out


def line_names(text: str) -> set[str]:
    return {ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if ln and not ln.startswith("#")}


def test_dcgm_units_and_labels() -> None:
    g = GpuSample(identity(0), True, fields())
    text = Renderer().render(snapshot([g])).text.decode()
    s = samples_by_name(text)
    assert s["DCGM_FI_DEV_POWER_USAGE"][0].value == 312.25
    assert s["DCGM_FI_DEV_SM_CLOCK"][0].value == 1755
    assert s["DCGM_FI_DEV_FB_USED"][0].value == 40 * 1024  # MiB
    assert s["DCGM_FI_DEV_GPU_UTIL"][0].value == 87
    assert s["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0].value == 1_234_500  # mJ
    labels = s["DCGM_FI_DEV_GPU_TEMP"][0].labels
    assert list(labels) == [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
    ]
    assert labels["modelName"] == H100 and labels["device"] == "nvidia0" and labels["Hostname"] == "node-a"
    # Own families join on the same labels but spell model_name.
    assert s["rightsizer_gpu_up"][0].labels["model_name"] == H100
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text


def test_hostname_label_switch_and_pod_and_mig_labels() -> None:
    ident = replace(
        identity(1), mig_profile="1g.10gb", mig_instance_id=9, parent_uuid="GPU-parent", uuid="MIG-abc"
    )
    g = GpuSample(ident, True, fields(), pod=PodRef("chat-0", "prod", "vllm"))
    text = Renderer("hostname").render(snapshot([g])).text.decode()
    labels = samples_by_name(text)["DCGM_FI_DEV_FB_USED"][0].labels
    assert list(labels) == [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "hostname",
        "DCGM_FI_DRIVER_VERSION",
        "pod",
        "namespace",
        "container",
    ]
    assert labels["UUID"] == "GPU-parent" and labels["GPU_I_ID"] == "9" and labels["pod"] == "chat-0"


def test_down_gpu_keeps_only_up_and_info() -> None:
    up = GpuSample(identity(0), True, fields())
    down = GpuSample(identity(1), False, {}, error="GPU is lost")
    text = Renderer().render(snapshot([up, down])).text.decode()
    s = samples_by_name(text)
    assert {x.labels["gpu"]: x.value for x in s["rightsizer_gpu_up"]} == {"0": 1, "1": 0}
    assert [x.labels["gpu"] for x in s["DCGM_FI_DEV_GPU_TEMP"]] == ["0"]
    assert {x.labels["gpu"] for x in s["rightsizer_gpu_info"]} == {"0", "1"}


def test_unsupported_fields_are_left_out_entirely() -> None:
    f = fields()
    del f["memory_temperature_celsius"]
    text = Renderer().render(snapshot([GpuSample(identity(0), True, f)])).text.decode()
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in text  # no HELP/TYPE for an empty family either


def test_openmetrics_parses_and_keeps_sample_names() -> None:
    g = GpuSample(identity(0), True, fields(), clock_event_reasons=0x4 | 0x1)
    exp = Renderer().render(snapshot([g], rows={"rightsizer_build_info": ()}))
    om = exp.openmetrics.decode()
    assert om.endswith("# EOF\n")
    fams = {f.name: f for f in parse_om(om)}
    # dcgm-exporter's counters have no _total: typed unknown in OpenMetrics, same sample name.
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    assert (
        fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0].name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    )
    assert fams["rightsizer_gpu"].type == "info"
    reasons = {s.labels["reason"]: s.value for s in fams["rightsizer_gpu_clock_event_active"].samples}
    assert reasons["sw_power_cap"] == 1 and reasons["gpu_idle"] == 1 and reasons["hw_slowdown"] == 0
    list(parse_text(exp.text.decode()))  # the text format parses too
    assert line_names(exp.text.decode()) == line_names(om)


def test_gzip_variants_decompress_to_the_same_bytes() -> None:
    exp = Renderer().render(snapshot([GpuSample(identity(0), True, fields())]))
    assert gzip.decompress(exp.body(False, True)) == exp.text
    assert gzip.decompress(exp.body(True, True)) == exp.openmetrics
    assert exp.body(True, True) is exp.body(True, True)  # made once


def test_only_the_format_asked_for_is_made_and_kept() -> None:
    """A scrape holds one document, not both formats: Prometheus (OpenMetrics, gzip) keeps only the
    compressed bytes of one; a plain text scrape keeps only the text."""
    snap = snapshot([GpuSample(identity(0), True, fields())])
    exp = Renderer().render(snap)
    zipped = exp.body(True, True)
    assert [exp.cached(om, gz) is not None for om in (False, True) for gz in (False, True)] == [
        False, False, False, True,
    ]  # fmt: skip
    plain = Renderer().render(snap)
    text = plain.body(False, False)
    assert [plain.cached(om, gz) is not None for om in (False, True) for gz in (False, True)] == [
        True, False, False, False,
    ]  # fmt: skip
    # Asked for later, the other formats are the same documents as a fresh render makes.
    assert exp.text == text and gzip.decompress(zipped) == plain.openmetrics


def test_extension_rows_get_gpu_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    g = GpuSample(identity(0), True, fields())
    fam = Family(
        "rightsizer_test_score_ratio", "gauge", "ratio", "Test.", "extension", extra_labels=("extra",)
    )
    monkeypatch.setattr(render, "FAMILIES", (*FAMILIES, fam))
    rows = {fam.name: (Row(2.5, (("extra", "x"),), gpu=g),)}
    text = Renderer().render(snapshot([g], rows=rows)).text.decode()
    line = next(ln for ln in text.splitlines() if ln.startswith(fam.name + "{"))
    assert 'model_name="' in line and line.endswith('extra="x"} 2.5')


@pytest.mark.parametrize(
    ("value", "text"),
    [(1.0, "1"), (0.5, "0.5"), (float("nan"), "NaN"), (float("inf"), "+Inf"), (-3.0, "-3"), (1e20, "1e+20")],
)
def test_format_value(value: float, text: str) -> None:
    assert format_value(value) == text


def test_promtool_findings_are_only_the_listed_dcgm_exceptions() -> None:
    promtool = require_binary("promtool")
    src = FakeSource(2)
    src.samples[1] = replace(src.samples[1], pod=PodRef("p", "ns", "c"))
    text = Renderer().render(snapshot(src.samples)).text
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    findings = set()
    for line in (result.stdout + result.stderr).decode().splitlines():
        name, _, finding = line.partition(" ")
        findings.add((name, finding))
    assert result.returncode in (0, 3), result.stderr
    unexpected = findings - PROMTOOL_EXCEPTIONS
    assert not unexpected, unexpected
    assert not any(name.startswith("rightsizer_") for name, _ in findings)


def test_mib_constant() -> None:
    assert MIB == 1048576
