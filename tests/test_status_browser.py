"""The status page in a real browser (headless Chromium): what a user sees at ``/``.

The exporter runs as a real process on a simulated fleet; expectations come from the scenario
files (``expect`` of each GPU), never from this file. ``UPDATE_SCREENSHOTS=1`` rewrites
``docs/status-page.png`` (the README's picture) from the default scenario.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium, console_problems, full_page_screenshot, viewport
from selenium import webdriver
from selenium.webdriver.common.by import By
from servers import ROOT, Process, exporter, wait_for

from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import load_scenario

DEFAULT = SCENARIO_DIR / "default.yaml"
HOSTILE = Path(__file__).parent / "scenarios" / "status_hostile_labels.yaml"


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def fleet() -> Iterator[Process]:
    with exporter(["--simulate", str(DEFAULT), "--hostname", "gpu-node-1"]) as p:
        yield p


@pytest.fixture(scope="module")
def hostile() -> Iterator[Process]:
    with exporter(["--simulate", str(HOSTILE)]) as p:
        yield p


def open_page(driver: webdriver.Chrome, url: str, width: int = 1280, dark: bool = False) -> None:
    viewport(driver, width, dark=dark)
    driver.get(url + "/")
    wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "tr.gpu"), 10, what="GPU rows")


def test_page_loads_without_console_errors_and_fetches_nothing_else(
    browser: webdriver.Chrome, fleet: Process
) -> None:
    console_problems(browser)  # forget earlier pages' messages
    open_page(browser, fleet.url)
    assert console_problems(browser) == []
    origin = fleet.url.rstrip("/")
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert [r for r in resources if not r.startswith(origin + "/")] == []
    assert browser.title.startswith("Rightsizer")


def test_one_row_per_gpu_with_the_scenario_verdicts(browser: webdriver.Chrome, fleet: Process) -> None:
    scenario = load_scenario(str(DEFAULT))
    open_page(browser, fleet.url)
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.gpu")
    shown = {r.get_attribute("data-uuid"): r for r in rows}
    assert sorted(shown) == sorted(g.uuid for g in scenario.gpus)
    for g in scenario.gpus:
        assert g.expect is not None, f"{g.name} has no expect in {DEFAULT}"
        row = shown[g.uuid]
        expected = g.expect.verdict
        assert row.get_attribute("data-verdict") == expected, g.name
        badge = row.find_element(By.CSS_SELECTOR, ".verdict")
        assert "v-" + expected in (badge.get_attribute("class") or "")
        assert badge.is_displayed()
        if g.pod is not None:
            assert row.find_element(By.CSS_SELECTOR, ".pod").text == g.pod.pod
    # The summary counts the same verdicts as the rows.
    chips = browser.find_element(By.CSS_SELECTOR, ".cards .chips").text
    judged = [g.expect.verdict for g in scenario.gpus if g.expect is not None]
    assert f"{judged.count('overprovisioned')} overprovisioned" in chips


def _points(browser: webdriver.Chrome, uuid: str) -> list[dict[str, Any]]:
    return browser.execute_script(  # type: ignore[no-any-return]
        """return [...document.querySelectorAll(`tr.charts[data-uuid="${arguments[0]}"] figure.chart`)]
        .map(f => ({title: f.querySelector('figcaption').textContent,
          points: [...f.querySelectorAll('polyline')].reduce((n, p) => n + p.points.numberOfItems, 0)
                  + f.querySelectorAll('circle').length}))""",
        uuid,
    )


def test_charts_are_drawn_from_the_window(browser: webdriver.Chrome, fleet: Process) -> None:
    scenario = load_scenario(str(DEFAULT))
    open_page(browser, fleet.url)
    for g in scenario.gpus:
        charts = _points(browser, g.uuid)
        titles = [c["title"] for c in charts]
        assert [t.split(" of ")[0] for t in titles] == [
            "Activity", "SM active vs GPU_UTIL", "Memory used", "DRAM active"
        ], g.name  # fmt: skip
        by_title = {c["title"].split(" of ")[0]: c["points"] for c in charts}
        # Every simulated GPU reports activity and memory; a replayed hour fills (nearly) every bucket.
        least = 30 if g.history_seconds > 0 else 1
        assert by_title["Activity"] >= least, (g.name, by_title)
        assert by_title["Memory used"] >= least, (g.name, by_title)


def test_label_values_are_shown_as_text(browser: webdriver.Chrome, hostile: Process) -> None:
    scenario = load_scenario(str(HOSTILE))
    console_problems(browser)
    open_page(browser, hostile.url)
    assert browser.execute_script("return window.pwned === undefined")
    assert "pwned" not in browser.title
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 1  # the page's own
    assert browser.find_elements(By.CSS_SELECTOR, "img") == []
    for g in scenario.gpus:
        assert g.pod is not None and g.expect is not None
        row = browser.find_element(By.CSS_SELECTOR, f'tr.gpu[data-uuid="{g.uuid}"]')
        assert row.find_element(By.CSS_SELECTOR, ".pod").text == g.pod.pod
        assert g.pod.namespace in row.text
        assert row.get_attribute("data-verdict") == g.expect.verdict
    assert console_problems(browser) == []


def test_numbers_line_up_under_their_headers(browser: webdriver.Chrome, fleet: Process) -> None:
    """Every numeric column (Saved, Depth, In flight, Took): its header's text ends where its
    values' text ends, at the right of the column, at 1280 px."""
    open_page(browser, fleet.url)
    columns = browser.execute_script(
        """const end = el => { const r = document.createRange(); r.selectNodeContents(el);
                               return r.getBoundingClientRect().right; };
        return [...document.querySelectorAll('main table')].flatMap(t =>
          [...t.querySelectorAll('thead th')].map((th, i) => ({
            header: th.textContent, num: th.classList.contains('num'), end: end(th),
            cells: [...t.querySelectorAll('tbody tr:not(.charts)')].map(r => r.children[i])
              .filter(Boolean).map(end)})))"""
    )
    numeric = [c for c in columns if c["num"]]
    assert {c["header"] for c in numeric} >= {"Saved", "Depth", "In flight", "Took"}, columns
    for c in numeric:
        assert c["cells"] and all(abs(end - c["end"]) < 1 for end in c["cells"]), c


def test_upgrades_and_missing_history_are_said_in_words(browser: webdriver.Chrome, fleet: Process) -> None:
    """An upgrade's price is what it costs more, in the text's colour, not a red "+"; a GPU without
    enough data says what it lacks (the default fleet's A100 40GB has no past)."""
    scenario = load_scenario(str(DEFAULT))
    open_page(browser, fleet.url)
    rows = {r.get_attribute("data-uuid"): r for r in browser.find_elements(By.CSS_SELECTOR, "tr.gpu")}
    under = [g for g in scenario.gpus if g.expect is not None and g.expect.verdict == "underprovisioned"]
    assert under
    for g in under:
        saved = rows[g.uuid].find_element(By.CSS_SELECTOR, 'td[data-label="Saved"]')
        assert re.fullmatch(r"costs \$\d+\.\d\d/h more", saved.text), saved.text
        colour = saved.find_element(By.CSS_SELECTOR, "span").value_of_css_property("color")
        assert colour == saved.value_of_css_property("color"), colour
    waiting = [g for g in scenario.gpus if g.expect is not None and g.expect.verdict == "insufficient_data"]
    assert waiting
    lacks = r"needs \d+ samples over 10 min before judging: \d+ (min|s) more history"
    for g in waiting:
        reason = rows[g.uuid].find_element(By.CSS_SELECTOR, ".reason").text
        assert re.search(lacks, reason), reason


@pytest.mark.parametrize("width", [390, 1280])
def test_no_horizontal_overflow(browser: webdriver.Chrome, fleet: Process, width: int) -> None:
    open_page(browser, fleet.url, width)
    scroll, client = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client, f"the page is {scroll} px wide in a {client} px viewport"
    first = browser.find_element(By.CSS_SELECTOR, "tr.gpu .verdict")
    assert first.is_displayed() and first.location["x"] + first.size["width"] <= client


def _background_luminance(browser: webdriver.Chrome) -> float:
    rgb = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    r, g, b = (int(x) for x in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_light_and_dark(browser: webdriver.Chrome, fleet: Process) -> None:
    open_page(browser, fleet.url, dark=False)
    assert _background_luminance(browser) > 0.8
    open_page(browser, fleet.url, dark=True)
    assert _background_luminance(browser) < 0.2


def test_refreshes_in_place(browser: webdriver.Chrome, fleet: Process) -> None:
    """The page swaps in the newest content without reloading: a mark left on the window survives
    while the sampling time shown moves on."""
    open_page(browser, fleet.url)
    first = browser.find_element(By.ID, "sampled-at").text
    browser.execute_script("window.__kept = 42")
    wait_for(lambda: browser.find_element(By.ID, "sampled-at").text != first, 30, what="a refresh")
    assert browser.execute_script("return window.__kept") == 42
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.gpu")) == len(load_scenario(str(DEFAULT)).gpus)


def test_screenshots(browser: webdriver.Chrome, fleet: Process, tmp_path: Path) -> None:
    """Full-page pictures at 1280 px (light, dark) and 390 px, kept in the test's directory; with
    UPDATE_SCREENSHOTS=1 the first screen at 1280 px replaces docs/status-page.png (the README's)."""
    for name, width, dark in (("light", 1280, False), ("dark", 1280, True), ("phone", 390, False)):
        open_page(browser, fleet.url, width, dark)
        full_page_screenshot(browser, str(tmp_path / f"{name}.png"), width, dark)
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    docs = ROOT / "docs" / "status-page.png"
    if os.environ.get("UPDATE_SCREENSHOTS"):
        open_page(browser, fleet.url, 1280)
        viewport(browser, 1280, 1120)
        browser.save_screenshot(str(docs))
    assert docs.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "run with UPDATE_SCREENSHOTS=1 once"


def test_links_lead_to_the_apis(browser: webdriver.Chrome, fleet: Process) -> None:
    open_page(browser, fleet.url)
    links = {a.text: a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "header nav a")}
    assert {"/metrics", "/api/v1/gpus", "/api/v1/rightsizing", "/api/v1/queues", "/api/v1/pods"} <= set(links)
    assert all(href == fleet.url + text for text, href in links.items())
