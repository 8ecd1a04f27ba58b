"""Pages checked as a reader sees them: each HTML file the project writes (the feedback page, the class
report) is opened in a real headless Chromium at a laptop width, and the check fails on what a reader
would hit: a broken image, a page wider than the window, text too small to read, a blank render, or a
page that is not self-contained (it fetches anything, or logs errors).

The fixture is every test's (tests/conftest.py loads this module as a plugin); a test imports only the
assertion:

    from helpers.browser import assert_readable

    def test_feedback_page_is_readable(check_page, tmp_path):
        assert_readable(check_page(write_page(tmp_path)))

The browser is Debian's `chromium` driven through Debian's `chromium-driver` by Selenium (the `test`
extra); where either is missing, every test that asks for `check_page` skips and says what to install.
One browser serves the whole pytest session."""
from __future__ import annotations

import base64
import functools
import importlib.util
import io
import json
import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

LAPTOP_WIDTH, LAPTOP_HEIGHT = 1366, 800
PHONE_WIDTH = 400
MIN_FONT_PX = 12

# Bounds the memory one screenshot takes (22 M pixels at the laptop width); a taller page's screenshot is
# cut at the bottom, while the checks on images, width and text still cover all of it.
MAX_SCREENSHOT_HEIGHT = 16384

# As root in a container, without a display or a GPU, and with nothing of its own reaching for the
# network: without the background-networking flags the closed network refuses many connections at once,
# and without the resolver rule it still looks up Google's hosts (sign-in, new-tab page, hints).
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--host-resolver-rules=MAP * ~NOTFOUND",
    f"--window-size={LAPTOP_WIDTH},{LAPTOP_HEIGHT}",
)
# A self-contained page needs none of these; blocking them makes a check the same offline and online.
BLOCKED_URLS = ["http://*", "https://*", "ws://*", "wss://*", "ftp://*"]
# Schemes that do not leave the page: embedded data, and the browser's own pages.
LOCAL_SCHEMES = ("data:", "blob:", "about:", "chrome:", "chrome-untrusted:", "devtools:")

INSTALL_HINT = ("apt-get install chromium chromium-driver (Debian; .ci/run does it) "
                "and pip install -e '.[test]'")

_PAGE_STATE = """
const root = document.documentElement;
const broken = Array.from(document.images)
    .filter(img => !img.complete || img.naturalWidth === 0)
    .map(img => [img.currentSrc || img.getAttribute('src') || '(no src)',
                 img.complete ? 'did not load' : 'still loading after the load event']);
let smallest = null;
const walker = document.createTreeWalker(document.body || root, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.textContent.replace(/\\s+/g, ' ').trim();
    const el = node.parentElement;
    if (!text || !el || !el.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const box = range.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;
    const size = parseFloat(getComputedStyle(el).fontSize);
    if (smallest === null || size < smallest[0]) smallest = [size, text.slice(0, 60), el.tagName.toLowerCase()];
}
return {broken: broken, scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, smallest: smallest};
"""


@dataclass(frozen=True)
class PageCheck:
    """What one page looked like at one window size."""
    path: Path
    width: int
    height: int
    screenshot: bytes            # PNG of the whole page (cut at MAX_SCREENSHOT_HEIGHT)
    screenshot_size: tuple[int, int]
    screenshot_blank: bool       # a single colour from corner to corner
    broken_images: list[str]     # "src: why", src shortened
    scroll_width: int            # the page's width; wider than the window means a sideways scroll
    client_width: int
    smallest_font_px: float | None  # None: no visible text at all
    smallest_text: str           # where the smallest text is, for the failure message
    requests: list[str]          # everything fetched from outside the file itself
    console_errors: list[str]

    @property
    def scrolls_horizontally(self) -> bool:
        return self.scroll_width > self.client_width

    def problems(self, min_font_px: float = MIN_FONT_PX) -> list[str]:
        found = [f"broken image {image}" for image in self.broken_images]
        if self.scrolls_horizontally:
            found.append(f"scrolls horizontally: {self.scroll_width} px wide in a {self.client_width} px window")
        if self.smallest_font_px is None:
            found.append("no visible text")
        elif self.smallest_font_px < min_font_px:
            found.append(f"text of {self.smallest_font_px:g} px (< {min_font_px:g} px): {self.smallest_text}")
        if self.screenshot_blank:
            found.append(f"the screenshot ({self.screenshot_size[0]}x{self.screenshot_size[1]}) is one colour")
        found += [f"fetches {url}" for url in self.requests]
        found += [f"console error: {message}" for message in self.console_errors]
        return found


def assert_readable(check: PageCheck, min_font_px: float = MIN_FONT_PX) -> None:
    """Fail with every problem at once, so one run shows all that a page needs fixed."""
    problems = check.problems(min_font_px)
    if problems:  # raised, not asserted: pytest rewrites a plugin's asserts and would re-indent the list
        raise AssertionError(f"{check.path.name} at {check.width}x{check.height}:\n  " + "\n  ".join(problems))


def browser_unavailable(which=shutil.which, find_spec=importlib.util.find_spec) -> str | None:
    """Why no browser can be started here, or None: the reason a page test skips with."""
    missing = [name for name in ("chromium", "chromedriver") if which(name) is None]
    if find_spec("selenium") is None:
        missing.append("the selenium package")
    return f"{', '.join(missing)} not found: {INSTALL_HINT}" if missing else None


def start_chromium(profile: Path, local_server: bool = False):
    """Chromium under chromedriver, both named by path so that Selenium Manager (which would download a
    browser and a driver of its own) is never consulted; `profile` is a new empty directory. With
    `local_server`, pages of a server on 127.0.0.1 load too (formgrader); every other host stays out."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    flags = [f.replace("~NOTFOUND", "~NOTFOUND, EXCLUDE 127.0.0.1") if local_server else f for f in CHROMIUM_FLAGS]
    for flag in (*flags, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(10)
    driver.execute_cdp_cmd("Network.enable", {})
    # A page behaves as the focused window a TA's is: Chromium 150 headless runs no autofocus (and no focus
    # event) in an unfocused page, so a payload that waits for focus would look inert where it is not.
    driver.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})
    if not local_server:
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": BLOCKED_URLS})
    return driver


@pytest.fixture(scope="session")
def check_page():
    """check_page(path, width=LAPTOP_WIDTH, height=LAPTOP_HEIGHT) -> PageCheck."""
    reason = browser_unavailable()
    if reason:
        pytest.skip(reason)
    profile = Path(tempfile.mkdtemp(prefix="bpn-chromium-"))
    try:
        driver = start_chromium(profile)
        try:
            yield functools.partial(_check_page, driver)
        finally:
            driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def loopback_browser(tmp_path_factory):
    """A Chromium that loads pages of servers on 127.0.0.1 too (formgrader), one per test module."""
    reason = browser_unavailable()
    if reason:
        pytest.skip(reason)
    driver = start_chromium(tmp_path_factory.mktemp("chromium"), local_server=True)
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def _short(url: str) -> str:
    """A long URL by its two ends: where it is and which file it names."""
    return url if len(url) <= 80 else url[:37] + "..." + url[-40:]


def _requests_from(performance_log, page_url: str) -> list[str]:
    urls = []
    for entry in performance_log:
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if url != page_url and not url.startswith(LOCAL_SCHEMES) and _short(url) not in urls:
                urls.append(_short(url))
    return urls


def _screenshot(driver, width: int) -> bytes:
    """The whole page, not only the window: what is below the fold is where a broken table hides."""
    content = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "scale": 1, "width": max(width, math.ceil(content["width"])),
            "height": min(MAX_SCREENSHOT_HEIGHT, math.ceil(content["height"]))}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot",
                                  {"format": "png", "clip": clip, "captureBeyondViewport": True})
    return base64.b64decode(shot["data"])


def _check_page(driver, path, width: int = LAPTOP_WIDTH, height: int = LAPTOP_HEIGHT) -> PageCheck:
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no page at {path}")
    # A window of exactly width x height CSS pixels at scale 1; not a phone emulation, so a narrow
    # width is a narrow window and a missing <meta name=viewport> cannot hide a wide page.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    for log in ("performance", "browser"):
        driver.get_log(log)  # drop what came before this page
    url = path.as_uri()
    driver.get(url)  # returns after the load event: every image has loaded or failed
    driver.execute_async_script("document.fonts.ready.then(() => arguments[arguments.length - 1]())")
    state = driver.execute_script(_PAGE_STATE)
    png = _screenshot(driver, width)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    smallest = state["smallest"]
    return PageCheck(
        path=path, width=width, height=height, screenshot=png, screenshot_size=image.size,
        screenshot_blank=all(low == high for low, high in image.getextrema()),
        broken_images=[f"{_short(src)}: {why}" for src, why in state["broken"]],
        scroll_width=state["scrollWidth"], client_width=state["clientWidth"],
        smallest_font_px=smallest[0] if smallest else None,
        smallest_text=f"<{smallest[2]}> {smallest[1]!r}" if smallest else "",
        requests=_requests_from(driver.get_log("performance"), url),
        console_errors=[entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"],
    )
