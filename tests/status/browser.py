"""Headless Debian Chromium driven by selenium over ``chromedriver`` (docs/operations.md
§13.1): what the status page tests read pages with. A machine without ``chromium`` or
``chromium-driver`` fails these tests, naming what to install; it does not skip them (issue
28: a page that lies must not pass unseen because the browser is missing).

    with open_browser(tmp_path) as driver:
        driver.get(url)
        text_of(driver, "ha-state")
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)

T = TypeVar("T")


def chromium_paths() -> tuple[str, str]:
    """``chromium`` and ``chromedriver`` on PATH; the test fails, naming them, without."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        missing = " and ".join(
            name for name, path in (("chromium", chromium), ("chromedriver", driver))
            if path is None
        )
        pytest.fail(
            f"{missing} not found: the status page tests need Debian's chromium and "
            "chromium-driver (scripts/bootstrap.sh installs them as root)",
            pytrace=False,
        )
    return chromium, driver


@contextmanager
def open_browser(profile_dir: Path) -> Iterator[Any]:
    """A headless Chromium (selenium ``webdriver.Chrome``), quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.add_argument("--window-size=1280,1100")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    try:
        yield driver
    finally:
        driver.quit()


def text_of(driver: Any, element_id: str) -> str:
    """The text of the element ``element_id`` ("" when the page has none)."""
    return str(driver.execute_script(
        "var e = document.getElementById(arguments[0]); return e ? e.textContent : '';",
        element_id,
    ))


def table_rows(driver: Any, table_id: str) -> list[list[str]]:
    """The text of each cell of each data row of table ``table_id``, as shown now."""
    rows: list[list[str]] = driver.execute_script(
        "var t = document.getElementById(arguments[0]); if (!t) { return []; }"
        "return Array.from(t.rows).slice(1).map(r => Array.from(r.cells).map(c => c.textContent));",
        table_id,
    )
    return rows


def wait_until(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Poll ``probe`` until it returns something other than None or False; fail naming
    ``what`` and the last thing seen after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if seen is not None and seen is not False:
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s", pytrace=False)
        time.sleep(0.1)
