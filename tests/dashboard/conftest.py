"""Fixtures: a live name server, broker and dashboard (dashboard_support.LiveCluster), and one headless
Chromium, each shared by the whole directory."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from dashboard_support import LiveCluster

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    live = LiveCluster(tmp_path_factory.mktemp("dashboard") / "data")
    live.start()
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """Headless Chromium driven by selenium, with its window wide enough for the tables."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if shutil.which(path) is None]
    if missing:
        pytest.skip(f"the browser tests need {' and '.join(missing)} (scripts/_chromium.sh installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
