"""The HTML report in a real browser (headless Chromium), opened as a file the way an SRE opens an
attachment: no console errors and nothing fetched, one row per judged unit with the JSON report's
verdicts, charts drawn with points, hostile labels shown as text, usable on a phone.
``UPDATE_SCREENSHOTS=1`` rewrites ``docs/report.png`` (the README's picture)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import chromium, console_problems, full_page_screenshot, viewport
from report_files import Written
from selenium import webdriver
from selenium.webdriver.common.by import By
from servers import ROOT


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver



def open_report(driver: webdriver.Chrome, w: Written, width: int = 1280, dark: bool = False) -> None:
    viewport(driver, width, dark=dark)
    driver.get((w.dir / "report.html").as_uri())
    assert driver.find_elements(By.CSS_SELECTOR, "tr.gpu"), "no GPU rows"


def test_opens_from_a_file_without_console_errors_or_fetches(
    browser: webdriver.Chrome, fleet: Written
) -> None:
    console_problems(browser)
    open_report(browser, fleet)
    assert console_problems(browser) == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert browser.title.startswith("Rightsizer report")


def test_rows_verdicts_and_charts(browser: webdriver.Chrome, fleet: Written) -> None:
    open_report(browser, fleet)
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.gpu")
    gpus = fleet.json["gpus"]
    assert [(r.get_attribute("data-uuid"), r.get_attribute("data-verdict")) for r in rows] == [
        (g["uuid"], g["verdict"]) for g in gpus
    ]
    for row in rows:
        badge = row.find_element(By.CSS_SELECTOR, ".verdict")
        assert badge.is_displayed()
        assert "v-" + str(row.get_attribute("data-verdict")) in str(badge.get_attribute("class"))
    drawn = browser.execute_script(
        """return [...document.querySelectorAll('tr.charts')].map(r => [...r.querySelectorAll('figure.chart')]
           .map(f => [...f.querySelectorAll('polyline')].reduce((n, p) => n + p.points.numberOfItems, 0)
                     + f.querySelectorAll('circle').length))"""
    )
    assert len(drawn) == len(gpus)
    for points in drawn:
        assert len(points) == 4 and points[0] > 100 and points[2] > 100, points  # activity, memory


def test_label_values_are_shown_as_text(browser: webdriver.Chrome, hostile: Written) -> None:
    console_problems(browser)
    open_report(browser, hostile)
    assert browser.execute_script("return window.pwned === undefined")
    assert "pwned" not in browser.title
    assert browser.find_elements(By.TAG_NAME, "script") == []
    assert browser.find_elements(By.TAG_NAME, "img") == []
    pods = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "tr.gpu .pod")]
    assert pods == [g["pod"] for g in hostile.json["gpus"]]
    workloads = browser.find_element(By.CSS_SELECTOR, "table.workloads").text
    assert "<img src=x onerror=window.pwned=3>" in workloads and "<b>llm</b>" in workloads
    assert console_problems(browser) == []


@pytest.mark.parametrize("width", [390, 1280])
def test_no_horizontal_overflow(
    browser: webdriver.Chrome, fleet: Written, hostile: Written, width: int
) -> None:
    for w in (fleet, hostile):  # the hostile names are long words without spaces
        open_report(browser, w, width)
        scroll, client = browser.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert scroll <= client, f"the report is {scroll} px wide in a {client} px viewport"
        for chip in browser.find_elements(By.CSS_SELECTOR, "tr.gpu .verdict")[:3]:
            assert chip.is_displayed() and chip.location["x"] + chip.size["width"] <= client


def test_screenshots(browser: webdriver.Chrome, fleet: Written, tmp_path: Path) -> None:
    """Full-page pictures at 1280 px (light, dark) and 390 px in the test's directory; with
    UPDATE_SCREENSHOTS=1 the first screen at 1280 px replaces docs/report.png."""
    for name, width, dark in (("light", 1280, False), ("dark", 1280, True), ("phone", 390, False)):
        open_report(browser, fleet, width, dark)
        full_page_screenshot(browser, str(tmp_path / f"{name}.png"), width, dark)
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    docs = ROOT / "docs" / "report.png"
    if os.environ.get("UPDATE_SCREENSHOTS"):
        open_report(browser, fleet, 1280)
        viewport(browser, 1280, 1120)
        browser.save_screenshot(str(docs))
    assert docs.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "run with UPDATE_SCREENSHOTS=1 once"
