"""The node's dcgm-exporter as a source, over real HTTP on loopback: a down, failing, hung, junk or
stale dcgm-exporter is a down source (``rightsizer_dcgm_exporter_up`` 0, its collector failing)
and none of its values is used (unknown, never 0); a good read is used until it is too old."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from queue_servers import FakeHttpServer

from exporter.config import load_config
from exporter.sampler import Contribution
from exporter.sources.dcgm.extension import DcgmExporterExtension
from exporter.sources.dcgm.settings import DcgmExporterSettings
from rightsizer_core.settings import ConfigError
from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample

PAGE = (Path(__file__).parent / "fixtures" / "dcgm" / "a30-mig-pods.prom").read_bytes()
PARENT = "GPU-603a8873-0edd-c157-ce48-2078e8b1a935"
INSTANCE = GpuIdentity(
    0,
    "MIG-603a8873-1",
    "00000000:3B:00.0",
    "NVIDIA A30 MIG 2g.12gb",
    0,
    "535",
    12 << 30,
    "2g.12gb",
    1,
    PARENT,
)
SAMPLE = GpuSample(INSTANCE, True, {"memory_used_bytes": 1.0}, frozenset({"gr_engine_active_ratio"}))
READING = GpuReading(0.0, (SAMPLE,), CollectorStatus("nvml", True, 0.0))


def extension(url: str, **kw: float) -> DcgmExporterExtension:
    return DcgmExporterExtension(DcgmExporterSettings(url=url, timeout_seconds=kw.pop("timeout", 1.0), **kw))


async def read_once(ext: DcgmExporterExtension) -> Contribution:
    await ext.poll()
    return ext.contribute(READING, READING.gpus)


async def test_a_good_page_fills_the_instance_and_says_up() -> None:
    with FakeHttpServer() as server:
        server.route("/metrics", body=PAGE)
        ext = extension(server.url("/metrics"))
        got = await read_once(ext)
        ext.reader.close()
    (gpu,) = got.gpus
    assert gpu.fields["gr_engine_active_ratio"] == 0.381124 and gpu.fields["tensor_active_ratio"] == 0.022137
    assert "gr_engine_active_ratio" not in gpu.unsupported
    assert got.rows["rightsizer_dcgm_exporter_up"][0].value == 1.0
    assert got.rows["rightsizer_dcgm_exporter_gpus"][0].value == 1.0
    assert got.collectors[0].name == "dcgm_exporter" and got.collectors[0].success
    assert got.api["dcgm_exporter"]["gpus"] == [
        {"uuid": "MIG-603a8873-1", "fields": ["gr_engine_active_ratio", "tensor_active_ratio"]}
    ]


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        ({"status": 500, "body": b"oops"}, "HTTP 500"),
        ({"body": b"<html>login</html>", "content_type": "text/html"}, "text/html"),
        ({"body": b"up 1\nnode_load1 0.5\n"}, "not a dcgm-exporter page"),
        ({"body": PAGE.replace(b"0.381124", b"zero")}, "cannot parse"),
        ({"hang": True}, "no answer within 0.3 s"),
    ],
    ids=["http-500", "html", "not-dcgm", "junk-value", "hung"],
)
async def test_a_failing_dcgm_exporter_is_down_and_its_values_unused(route: dict, reason: str) -> None:
    with FakeHttpServer() as server:
        server.route("/metrics", body=PAGE)
        ext = extension(server.url("/metrics"), timeout=0.3)
        assert (await read_once(ext)).rows["rightsizer_dcgm_exporter_up"][0].value == 1.0
        server.route("/metrics", **route)
        got = await read_once(ext)
        ext.reader.close()
    assert got.gpus == (SAMPLE,)  # the last good values are not used either
    assert got.rows["rightsizer_dcgm_exporter_up"][0].value == 0.0
    assert got.rows["rightsizer_dcgm_exporter_gpus"][0].value == 0.0
    assert not got.collectors[0].success and reason in (got.collectors[0].error or "")
    assert got.api["dcgm_exporter"]["up"] is False


async def test_nothing_listening_is_down() -> None:
    with FakeHttpServer() as server:
        url = server.url("/metrics")
    got = await read_once(extension(url))
    assert got.rows["rightsizer_dcgm_exporter_up"][0].value == 0.0
    assert "cannot connect" in (got.collectors[0].error or "")
    assert "rightsizer_dcgm_exporter_last_success_timestamp_seconds" not in got.rows


async def test_a_read_older_than_max_age_is_not_used() -> None:
    with FakeHttpServer() as server:
        server.route("/metrics", body=PAGE)
        ext = extension(server.url("/metrics"), max_age_seconds=5.0)
        await ext.poll()
        ext.reader.close()
    assert ext.state.read_at is not None
    ext.state.read_at -= 6.0  # as if the poller had stalled for 6 s
    got = ext.contribute(READING, READING.gpus)
    assert got.gpus == (SAMPLE,) and got.rows["rightsizer_dcgm_exporter_up"][0].value == 0.0
    assert "more than 5 s ago" in (got.collectors[0].error or "")
    assert got.rows["rightsizer_dcgm_exporter_last_success_timestamp_seconds"][0].value <= time.time()


async def test_an_oversized_answer_is_refused() -> None:
    line = f'DCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="{PARENT}",GPU_I_ID="1"}} 0.5\n'.encode()
    with FakeHttpServer() as server:
        server.route("/metrics", body=line * 200)
        ext = DcgmExporterExtension(DcgmExporterSettings(url=server.url("/metrics"), max_series=100))
        got = await read_once(ext)
        server.route("/metrics", body=line + b"# padding\n" * 500)
        ext2 = DcgmExporterExtension(DcgmExporterSettings(url=server.url("/metrics"), max_body_bytes=2048))
        got2 = await read_once(ext2)
        ext.reader.close()
        ext2.reader.close()
    assert "more than 100 series" in (got.collectors[0].error or "")
    assert "larger than 2048 bytes" in (got2.collectors[0].error or "")


@pytest.mark.parametrize(
    ("url", "message"),
    [("ftp://node:9400/metrics", "http:// or https://"), ("http://u:p@node:9400/metrics", "no credentials")],
)
def test_a_bad_url_is_a_configuration_error(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"dcgm_exporter": {"url": url}}, environ={})


def test_unknown_keys_are_refused_and_off_by_default() -> None:
    assert not load_config(None, {}, environ={}).dcgm_exporter.enabled
    with pytest.raises(ConfigError, match="urll"):
        load_config(None, {"dcgm_exporter": {"urll": "http://x:9400/metrics"}}, environ={})
