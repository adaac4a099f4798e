"""The status page as a reader takes it in, in headless Chromium at 1400 and 800 px: no sideways
scrolling, a UUID on one line, figures in units that stay short, the node named as a node, and
charts with axes.

The fleet is tests/scenarios/slo_latency.yaml with one target tightened: chat-ttft queues for a
minute (its TTFT p95 is about 60 s, the scenario's own arithmetic) against a 10 ms target, some
6000 times over it, and no GPU carries it (add replicas). Screenshots of both widths are saved in
the test's temporary directory (printed with -s), never in the repository.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from browser import chromium, full_page_screenshot, viewport
from selenium import webdriver
from selenium.webdriver.common.by import By
from servers import Process, exporter, wait_for

SCENARIO = Path(__file__).parent / "scenarios" / "slo_latency.yaml"
WIDTHS = (1400, 800)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    scenario = yaml.safe_load(SCENARIO.read_text())
    (gpu,) = [g for g in scenario["gpus"] if g["queue"]["name"] == "chat-ttft"]
    gpu["queue"]["slo"] = {"ttft_seconds": 0.01}
    path = tmp_path_factory.mktemp("fleet") / "slo-far-over.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    with exporter(["--simulate", str(path), "--hostname", "gpu-node-1"]) as p:
        yield p


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


def open_page(driver: webdriver.Chrome, url: str, width: int) -> None:
    viewport(driver, width)
    driver.get(url + "/")
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "tr.slo"), 20, what="the SLO table")


@pytest.mark.parametrize("width", WIDTHS)
def test_no_sideways_scroll_and_uuids_on_one_line(
    browser: webdriver.Chrome, fleet: Process, width: int, tmp_path: Path
) -> None:
    open_page(browser, fleet.url, width)
    scroll, client = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client, f"the page is {scroll} px wide in a {client} px viewport"
    heights = browser.execute_script(
        "return [...document.querySelectorAll('tr.gpu .id')].map(e => "
        "[e.getBoundingClientRect().height, parseFloat(getComputedStyle(e).lineHeight) || 16, e.title])"
    )
    assert heights, "no UUID cell"
    for height, line, title in heights:
        assert height <= 1.5 * line, f"UUID {title} takes {height / line:.1f} lines"
        assert title.startswith("GPU-") or title.startswith("MIG-"), "the whole UUID is its title"
    shot = tmp_path / f"status-{width}.png"
    full_page_screenshot(browser, str(shot), width)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"screenshot: {shot}")


def test_figures_stay_short(browser: webdriver.Chrome, fleet: Process) -> None:
    open_page(browser, fleet.url, 1400)
    text = browser.find_element(By.TAG_NAME, "main").text
    rows = {
        r.find_element(By.TAG_NAME, "b").text: r.text
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.slo")
    }
    far = rows["chat-ttft"]
    assert "missed: >100x the target" in far, far
    # ~60 s of TTFT p95 is said in seconds or minutes, against the 10 ms target
    assert re.search(r"ttft p95 (\d+\.\d\d s|\d+(\.\d+)? min) / 10 ms", far), far
    assert not re.search(r"\d{4,}%", text), "a percentage of four digits or more"
    assert not re.search(r"\d{5,} ms", text), "milliseconds past ten thousand"
    (month,) = re.findall(r"≈ \$([\d,.]+) a month", text)
    significant = month.replace(",", "").replace(".", "").lstrip("0").rstrip("0")
    assert len(significant) <= 3, f"${month} a month: more precision than prices times hours have"


def test_add_replicas_is_said_not_a_move_to_none(browser: webdriver.Chrome, fleet: Process) -> None:
    open_page(browser, fleet.url, 1400)
    text = browser.find_element(By.TAG_NAME, "main").text
    assert "move to none" not in text and "none —" not in text
    cells = [
        r.find_element(By.CSS_SELECTOR, 'td[data-label="Recommended"]').text
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.gpu")
        if "chat-ttft" in r.text
    ]
    assert cells == ["add replicas"], cells


def test_the_title_names_the_node_and_charts_have_axes(browser: webdriver.Chrome, fleet: Process) -> None:
    open_page(browser, fleet.url, 1400)
    assert browser.find_element(By.TAG_NAME, "h1").text == "Rightsizer node gpu-node-1"
    assert browser.title == "Rightsizer · node gpu-node-1"
    charts = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
    assert charts
    for chart in charts:
        assert chart.find_element(By.CSS_SELECTOR, ".yaxis").text.split() == ["100%", "50%", "0%"]
        assert chart.find_element(By.CSS_SELECTOR, ".xaxis").text.split("\n") == ["1 h ago", "now"]
