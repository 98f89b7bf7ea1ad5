"""Headless Debian Chromium driven by selenium, for tests that look at the HTML report.

The driver and browser are Debian's (``/usr/bin/chromedriver``, ``/usr/bin/chromium``),
named explicitly so selenium-manager never tries to download anything; Chromium runs with
networking background services off and an empty profile in a temporary directory.
:func:`open_browser` yields a ``WebDriver``; under ``CI=true`` a missing browser fails.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.infra.tools import require_tool

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


@contextmanager
def open_browser(
    width: int = 1400, height: int = 1000, *, javascript: bool = True
) -> Iterator[Any]:
    """A headless Chromium ``WebDriver``; ``javascript=False`` turns scripts off."""
    require_tool("chromium")
    require_tool("chromedriver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="pinguard-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument(f"--window-size={width},{height}")
        if not javascript:
            options.add_experimental_option(
                "prefs", {"profile.managed_default_content_settings.javascript": 2}
            )
        driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def file_url(path: Path) -> str:
    return path.resolve().as_uri()
