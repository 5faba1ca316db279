"""The live checkpoint page in a real browser: headless Chromium driven by Selenium.

The page of a snapshot path (``barriered ui``'s server) loads and shows its checkpoints;
a checkpoint recorded afterwards (through the driver's code path,
``monitoring_rows.finish``) appears without a reload, and so does a failed one with its
reason. Debian's ``chromium`` and ``chromium-driver`` are installed by ``make browser``
(CI runs it); without them the test is skipped and says why.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from barriered.monitoring.offline import path_view
from barriered.monitoring.server import MonitoringServer
from monitoring_rows import finish, snapshot_path

REASON = "declined by key group 3: No space left on device"


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip(
            "the browser test needs Debian's chromium and chromium-driver, which are not "
            "installed here (run `make browser` as root, or apt-get install chromium "
            "chromium-driver)"
        )
    return chromium, driver


@pytest.fixture()
def browser() -> Iterator[Any]:
    """A headless Chromium under Selenium."""
    chromium, driver_path = _browser_paths()
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def test_page_shows_checkpoints_and_updates_live(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    layout = snapshot_path(tmp_path / "snap")
    for cid in (1, 2, 3):
        finish(layout, cid)
    server = MonitoringServer(lambda: [path_view(layout)], refresh_ms=200)
    try:
        browser.get(server.url)

        def ids() -> list[str]:
            rows = browser.find_elements(By.CSS_SELECTOR, ".history tr.checkpoint")
            return [r.get_attribute("data-checkpoint-id") for r in rows]

        def tile(name: str) -> str:
            return str(browser.find_element(By.CSS_SELECTOR, f".count-{name} b").text)

        assert ids() == ["3", "2", "1"]
        assert (tile("completed"), tile("failed")) == ("3", "0")
        assert "Latest completed" in browser.find_element(By.CLASS_NAME, "latest-completed").text
        # a marker in the window: the page updates in place, it is not reloaded
        browser.execute_script("window.barrieredMarker = 42;")

        finish(layout, 4)
        WebDriverWait(browser, 20).until(lambda _: ids()[:1] == ["4"])
        assert tile("completed") == "4"
        assert browser.execute_script("return window.barrieredMarker;") == 42

        finish(layout, 5, REASON)
        WebDriverWait(browser, 20).until(lambda _: ids()[:1] == ["5"])
        failed = browser.find_element(By.CSS_SELECTOR, "tr[data-checkpoint-id='5']")
        assert failed.get_attribute("data-status") == "aborted"
        assert failed.find_element(By.CSS_SELECTOR, "td.reason").text == REASON
        assert REASON in browser.find_element(By.CLASS_NAME, "latest-failed").text
        assert (tile("completed"), tile("failed"), tile("total")) == ("4", "1", "5")
        assert "declined" in browser.find_element(By.CLASS_NAME, "failures").text
        assert len(browser.find_elements(By.CSS_SELECTOR, "tr[data-checkpoint-id='5'] .phase"))
        assert browser.execute_script("return window.barrieredMarker;") == 42
    finally:
        server.close()
