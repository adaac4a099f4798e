"""Headless Chromium for the browser tests, driven by Selenium through Debian's chromedriver.

Debian's ``chromium`` and ``chromium-driver`` must be installed (``scripts/test`` installs them).
Nothing is downloaded: the driver path is given, so Selenium Manager never runs, and the browser is
started with its background networking off and a fresh profile.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError(f"{names[0]} is not installed; run scripts/test, which installs the Debian packages")


@contextlib.contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium", "chromium-browser")
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(_binary("chromedriver")), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def viewport(driver: webdriver.Chrome, width: int, height: int = 900, dark: bool = False) -> None:
    """Emulate a screen ``width`` CSS pixels wide (a phone below 700) and a colour scheme."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
    )
    scheme = "dark" if dark else "light"
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]}
    )


def console_problems(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """Console messages at warning level or above since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") in ("WARNING", "SEVERE")]


def full_page_screenshot(driver: webdriver.Chrome, path: str, width: int, dark: bool = False) -> None:
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    viewport(driver, width, min(height, 6000), dark)
    driver.save_screenshot(path)
