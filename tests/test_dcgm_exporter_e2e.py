"""The exporter, run as a user runs it (``python -m exporter --simulate``, the dcgm-exporter URL
from the environment as a DaemonSet sets it), reading a dcgm-exporter page over HTTP on loopback:
the L4's SM and DRAM active are published under DCGM's names from the page, the source says it is
up, and once dcgm-exporter stops answering the source is down and the ratios are gone, not 0."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from queue_servers import FakeHttpServer
from servers import exporter, http_get, require_binary, wait_for

from exporter.sources.dcgm.page import read_page
from exporter.sources.simulated.dcgm_page import WITH_SM, dcgm_page
from exporter.sources.simulated.source import SimulatedSource, load_scenario

FLEET = Path(__file__).parent / "scenarios" / "dcgm" / "no_gpm_fleet.yaml"


def samples(url: str) -> dict[tuple[str, str], float]:
    """(family, UUID or collector) -> value, of /metrics."""
    status, _, body = http_get(url + "/metrics")
    assert status == 200
    return {
        (s.name, s.labels.get("UUID") or s.labels.get("collector", "")): s.value
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
    }


def test_the_exporter_publishes_dcgm_exporter_ratios_and_drops_them_when_it_goes_down() -> None:
    scenario = dataclasses.replace(load_scenario(str(FLEET)), start=1_780_000_000.0, frozen=True)
    page = dcgm_page(SimulatedSource(scenario), None, WITH_SM)
    l4 = next(g.uuid for g in scenario.gpus if g.name == "light-l4")
    want = read_page(page).values[(l4, None)]  # what the page says of the L4
    with FakeHttpServer() as dcgm:
        dcgm.route("/metrics", body=page.encode())
        env = {
            "RIGHTSIZER_DCGM_EXPORTER_URL": dcgm.url("/metrics"),
            "RIGHTSIZER_DCGM_EXPORTER_INTERVAL_SECONDS": "0.5",
        }
        with exporter(["--simulate", str(FLEET), "--interval", "0.5"], env=env) as p:
            got = wait_for(
                lambda: (s := samples(p.url)).get(("rightsizer_dcgm_exporter_up", "")) == 1.0 and s,
                30,
                what="dcgm-exporter up",
            )
            assert got[("DCGM_FI_PROF_SM_ACTIVE", l4)] == want["sm_active_ratio"]
            assert got[("DCGM_FI_PROF_DRAM_ACTIVE", l4)] == want["dram_active_ratio"]
            assert got[("rightsizer_dcgm_exporter_gpus", "")] == len(scenario.gpus)
            assert got[("rightsizer_collector_success", "dcgm_exporter")] == 1.0
            # The source's own families lint clean.
            text = http_get(p.url + "/metrics")[2].decode()
            blocks = [b for b in text.split("# HELP ") if b.startswith("rightsizer_dcgm_exporter_")]
            assert len(blocks) == 3
            lint = subprocess.run(
                [require_binary("promtool"), "check", "metrics"],
                input="".join("# HELP " + b for b in blocks),
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
            dcgm.route("/metrics", status=503, body=b"unavailable")
            down = wait_for(
                lambda: (s := samples(p.url)).get(("rightsizer_dcgm_exporter_up", "")) == 0.0 and s,
                30,
                what="dcgm-exporter down",
            )
            assert ("DCGM_FI_PROF_SM_ACTIVE", l4) not in down  # unknown, never 0
            assert ("DCGM_FI_DEV_GPU_UTIL", l4) in down  # NVML's own fields stay
            assert down[("rightsizer_collector_success", "dcgm_exporter")] == 0.0
            status, _, body = http_get(p.url + "/api/v1/dcgm_exporter")
            section = json.loads(body)["dcgm_exporter"]
            assert status == 200 and section["up"] is False and "HTTP 503" in section["error"]
