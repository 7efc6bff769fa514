"""Debian's Chromium, headless, driven by Selenium through Debian's chromedriver: the browser
of the tests that open the pages people use (the rater sheets, the report).

Nothing is downloaded: the driver's path is given, so Selenium Manager is never asked for a
browser or driver build (and SE_OFFLINE keeps it off the network if it were). Missing
Chromium is a failure that says how to install it, not a skip.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# no GPU, no sandbox (root in CI), and nothing that reaches the network on its own
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,1024")


@contextmanager
def headless_chromium(folder: Path) -> Iterator:
    """A Chromium WebDriver with a fresh profile in ``folder``/profile, saving downloads to
    ``folder``/downloads, the browser's console kept for get_log("browser"); prompts (alert,
    confirm) left open for the test to read and answer."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.is_file()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: install Debian's chromium and chromium-driver "
                    f"(bash scripts/install-system-deps.sh as root, which make install runs)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={folder / 'profile'}")
    (folder / "downloads").mkdir(parents=True, exist_ok=True)
    options.add_experimental_option("prefs", {
        "download.default_directory": str(folder / "downloads"), "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.unhandled_prompt_behavior = "ignore"
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("SE_OFFLINE", "true")
        driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """The browser console's errors since the last call (the log is read once)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def save_downloads_to(driver, folder: Path) -> None:
    """Downloads go to ``folder`` from now on (a test's own, so that no earlier file of the
    same name makes Chromium rename the next)."""
    folder.mkdir(parents=True, exist_ok=True)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)})


def downloaded(folder: Path, name: str, timeout: float = 30) -> Path:
    """``folder``/``name`` once Chromium has finished writing it."""
    path, deadline = folder / name, time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and not any(folder.glob("*.crdownload")):
            return path
        time.sleep(0.1)
    raise AssertionError(f"no download {name} in {timeout:.0f} s; {folder} holds {sorted(p.name for p in folder.iterdir())}")


def undecoded_images(driver) -> list[str]:
    """The alt text (or the start of the source) of every image of the page not decoded:
    not complete or of no natural width."""
    return driver.execute_script(
        "return Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)"
        ".map(i => i.alt || i.src.slice(0, 80));")
