"""``rightsizer report`` on young history: a Prometheus (and a VictoriaMetrics) that has held the
exporter's series for ~2 and ~12 minutes, judged with the default week-long window, a day and an hour.

The history is the real simulated exporter's (the default fleet: its chat-requests queue is a vLLM
server counting generated tokens), one exposition every 15 s as a scrape would keep, through the
exporter's own renderer; the live engine is fed the same readings. Whatever the window, the report
has only the samples there are, so its rates are the counters' increase over the time their
samples span, first to last: the live engine's figure (which divides the increase by the time its
readings span) within 2 %. Before, a week's window read the span to its 60 s subquery step and
Prometheus extrapolated ``increase`` beyond the samples: 2.3 x the exporter's figure at 2 minutes.

Then the same from the first scrapes of the real exporter process by a real Prometheus.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from report_history import ENGINES, Fleet, prometheus_with_history
from servers import exporter, http_get, prom_query, prometheus, wait_for

from exporter.sources.simulated.scenario import SCENARIO_DIR
from rightsizing.html_parts.charts import PAD, WIDTH

SCENARIO = SCENARIO_DIR / "default.yaml"
STEP = 15.0  # a common scrape interval
# 9 and 50 expositions, 15 s apart: 120 s and 735 s from the first sample to the last.
HISTORIES = {"2 min": (135.0, 120.0), "12 min": (750.0, 735.0)}
AFTER = 7.5  # the report runs half a scrape interval after the last sample


@pytest.fixture(scope="module", params=[(h, e) for h in HISTORIES for e in ENGINES], ids="-".join)
def young(request: pytest.FixtureRequest) -> Iterator[tuple[str, Fleet, float]]:
    history, engine = request.param
    seconds, span = HISTORIES[history]
    with prometheus_with_history([SCENARIO], seconds, STEP, engine=engine) as (url, fleets):
        yield url, fleets[0], span


def report(url: str, at: float, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
           "--at", f"{at:.3f}", *args]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def live_rates(fleet: Fleet) -> dict[str, float]:
    """The exporter's own figure: tokens (or requests) per second per queue, from the live engine."""
    return {c.queue: c.rate for c in fleet.live.costs}


@pytest.mark.parametrize("window", ["7d", "1d", "1h"])
def test_rates_and_history_found_from_the_first_minutes(young, window: str) -> None:
    url, fleet, span = young
    live = live_rates(fleet)
    # The default fleet's vLLM server counts generated tokens: the cost table has its rate.
    assert "chat-requests" in live and live["chat-requests"] > 0, live
    doc = json.loads(report(url, fleet.last + AFTER, "--window", window, "--format", "json").stdout)
    measured = {c["queue"]: c["per_second"] for c in doc["inference_costs"]}
    assert set(measured) == set(live)
    for queue, rate in live.items():
        assert measured[queue] == pytest.approx(rate, rel=0.02), (queue, measured[queue], rate)
    # History found: first to last sample, to the second (not to a subquery step or a minute).
    assert doc["totals"]["history_found_seconds"] == span
    assert doc["assumptions"]["history_found_seconds"] == span


def test_history_found_is_printed_exactly(young) -> None:
    url, fleet, span = young
    table = report(url, fleet.last + AFTER).stdout
    said = {120.0: "2 min", 735.0: "12 min 15 s"}[span]
    assert f"History found: {said} of the 7 d window (less than the window" in table, table[:800]
    html = report(url, fleet.last + AFTER, "--format", "html").stdout
    assert f"<dt>History found</dt><dd>{said}</dd>" in html


def test_html_charts_span_the_history_found(young) -> None:
    """A week's window holding minutes of data: the charts' time axis is the history found, so
    the lines run across the chart instead of a dot at its right edge."""
    url, fleet, span = young
    doc = json.loads(report(url, fleet.last + AFTER, "--format", "json").stdout)
    whole = {g["uuid"] for g in doc["gpus"] if g["history_seconds"] == span}  # sampled all along
    html = report(url, fleet.last + AFTER, "--format", "html").stdout
    rows = re.findall(r'<tr class="charts" data-uuid="([^"]+)">(.*?)</tr>', html)
    charted = {u: re.findall(r'class="s1" points="([^"]+)"', row) for u, row in rows if u in whole}
    assert len(whole) >= 6 and set(charted) == whole and all(charted.values()), (whole, html[:500])
    lines = [p for points in charted.values() for p in points]
    for points in lines:
        xs = [float(p.split(",")[0]) for p in points.split()]
        # Across the chart (VictoriaMetrics leaves out its last 30 s and aligns the steps: not
        # quite edge to edge), where a week's time axis drew a dot at the right edge.
        inner = WIDTH - 2 * PAD
        assert min(xs) <= PAD + 0.25 * inner and max(xs) >= PAD + 0.75 * inner, points
    charts = re.search(r"<dt>Charts</dt><dd>mean per (\d+) s step, ([^<]+) to ([^<]+) \(", html)
    assert charts, html[-3000:]
    assert int(charts.group(1)) <= span / 60  # about 120 points over the history, not over a week


@pytest.mark.usefixtures("prometheus_version")  # on 2.42 and 3.5 (tests/prometheus_versions.py)
def test_report_agrees_with_the_running_exporter_from_its_first_scrapes() -> None:
    """The exporter process on its default fleet, scraped every 3 s by Prometheus from its start:
    after eight scrapes (21 s between the first and the last), the report's rates with the
    default week-long window are the exporter's own (``/api/v1/rightsizing``) within 2 %."""
    with exporter(["--simulate"]) as exp, prometheus({"rightsizer": [exp.url.removeprefix("http://")]},
                                                     scrape_interval="3s") as prom:  # fmt: skip

        def scrapes() -> bool:
            stamps = prom_query(prom.url, "count_over_time(rightsizer_last_sample_timestamp_seconds[1h])")
            return bool(stamps) and float(stamps[0]["value"][1]) >= 8

        wait_for(scrapes, 90, interval=0.5, what="eight scrapes")
        doc = json.loads(report(prom.url, time.time(), "--format", "json").stdout)
        status, _, body = http_get(exp.url + "/api/v1/rightsizing")
        assert status == 200
    live = {w["queue"]: w["per_second"] for w in json.loads(body)["rightsizing"]["workloads"]}
    measured = {c["queue"]: c["per_second"] for c in doc["inference_costs"]}
    assert live and set(measured) == set(live), (measured, live)
    for queue, rate in live.items():
        assert measured[queue] == pytest.approx(rate, rel=0.02), (queue, measured[queue], rate)
    assert 15 <= doc["totals"]["history_found_seconds"] <= 60, doc["totals"]
