"""Headless Chromium for the page tests (Debian's ``chromium`` and ``chromium-driver``, driven by
Selenium); where either is missing the test skips with one line (``.ci/run`` installs both)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def chromium():
    """A started headless Chromium (the caller quits it), or a skip naming what to install."""
    if not (CHROMIUM and DRIVER):
        pytest.skip("no chromium / chromedriver (apt-get install chromium chromium-driver; .ci/run installs them)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--disable-dev-shm-usage",
    ):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def settled(driver) -> None:
    """Wait until the page has drawn what its address asks for."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")


def open_page(driver, page: Path, hash_: str = "") -> None:
    driver.get(page.as_uri() + hash_)
    settled(driver)


def shown(driver) -> list[str]:
    """Ids of the question rows on the current page of the table."""
    return driver.execute_script("return [...document.querySelectorAll('tr.question')].map(r => r.dataset.id)")


def count(driver) -> int:
    """How many questions the filters keep (the table's heading)."""
    return int(driver.execute_script("return document.getElementById('count').textContent").split(" of ")[0])
