"""The page checker itself, on small pages written here: a good page passes, and each fault it is there
to catch (broken image, sideways scroll, tiny text, blank render, a fetch, a console error) is caught
and named. Runs in the real headless Chromium; skips, saying what to install, where there is none."""
from __future__ import annotations

import base64
import io
import re
import shutil

import pytest
from PIL import Image

from helpers.browser import LAPTOP_WIDTH, PHONE_WIDTH, assert_readable, browser_unavailable, start_chromium

RED = (220, 20, 20)


def png(width=40, height=20, colour=RED) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def page(tmp_path, body: str, name="page.html") -> str:
    path = tmp_path / name
    path.write_text("<!doctype html><html><head><meta charset='utf-8'><title>t</title>"
                    "<style>body { font: 16px sans-serif; margin: 8px }</style></head>"
                    f"<body>{body}</body></html>", encoding="utf-8")
    return path


def test_a_good_page_passes_and_its_image_is_in_the_screenshot(check_page, tmp_path):
    check = check_page(page(tmp_path, f"<h1>Feedback</h1><p>dlogprobs: exact</p>"
                                      f"<img alt='loss' src='data:image/png;base64,{png()}'>"))
    assert_readable(check)
    assert (check.broken_images, check.requests, check.console_errors) == ([], [], [])
    assert check.smallest_font_px == 16 and not check.scrolls_horizontally
    shot = Image.open(io.BytesIO(check.screenshot)).convert("RGB")
    assert shot.size == check.screenshot_size and shot.width == LAPTOP_WIDTH
    assert {colour: count for count, colour in shot.getcolors(maxcolors=1 << 24)}[RED] == 40 * 20


def test_broken_images_are_named(check_page, tmp_path):
    check = check_page(page(tmp_path, "<p>text</p><img src='data:image/png;base64,!!!notbase64'>"
                                      "<img src='missing.png'>"))
    assert len(check.broken_images) == 2
    assert check.broken_images[0].startswith("data:image/png;base64,!!!notbase64: did not load")
    assert check.broken_images[1].endswith("missing.png: did not load")
    assert len(check.requests) == 1 and check.requests[0].endswith("/missing.png"), check.requests
    with pytest.raises(AssertionError, match=r"broken image .*missing\.png"):
        assert_readable(check)


def test_a_wide_table_scrolls_at_a_laptop_width(check_page, tmp_path):
    check = check_page(page(tmp_path, "<table style='width: 3000px'><tr><td>dW1</td></tr></table>"))
    assert check.scrolls_horizontally and check.scroll_width >= 3000
    assert check.screenshot_size[0] == check.scroll_width  # the screenshot shows all of it
    with pytest.raises(AssertionError, match=r"scrolls horizontally: \d+ px wide in a \d+ px window"):
        assert_readable(check)


def test_a_narrow_layout_fails_only_at_a_phone_width(check_page, tmp_path):
    path = page(tmp_path, "<div style='width: 600px'>per-tensor scores</div>")
    assert_readable(check_page(path))
    phone = check_page(path, width=PHONE_WIDTH)
    assert phone.client_width <= PHONE_WIDTH and phone.scrolls_horizontally
    with pytest.raises(AssertionError, match=r"at 400x800:\n  scrolls horizontally"):
        assert_readable(phone)


def test_tiny_text_is_caught_and_quoted(check_page, tmp_path):
    check = check_page(page(tmp_path, "<p>readable</p><p style='font-size: 8px'>the fine print</p>"
                                      "<p style='font-size: 6px; display: none'>hidden</p>"))
    assert check.smallest_font_px == 8
    with pytest.raises(AssertionError, match=r"text of 8 px \(< 12 px\): <p> 'the fine print'"):
        assert_readable(check)
    assert_readable(check, min_font_px=8)


def test_a_blank_page_is_caught(check_page, tmp_path):
    check = check_page(page(tmp_path, "<p style='color: white'> </p>"))
    assert check.screenshot_blank and check.smallest_font_px is None
    with pytest.raises(AssertionError, match="no visible text\n  the screenshot .* is one colour"):
        assert_readable(check)


def test_a_tall_page_is_captured_whole(check_page, tmp_path):
    check = check_page(page(tmp_path, "<p>top</p><div style='height: 3000px'></div><p>bottom</p>"))
    assert check.screenshot_size[1] > 3000
    assert_readable(check)


def test_a_fetch_is_blocked_and_reported_and_console_errors_are_kept(check_page, tmp_path):
    check = check_page(page(tmp_path, "<p>text</p><img src='http://example.invalid/plot.png'>"
                                      "<script>console.error('boom')</script>"))
    assert check.requests == ["http://example.invalid/plot.png"]
    assert check.broken_images == ["http://example.invalid/plot.png: did not load"]
    assert any("boom" in message for message in check.console_errors)
    with pytest.raises(AssertionError, match=r"fetches http://example\.invalid/plot\.png"):
        assert_readable(check)


def test_a_missing_page_is_an_error_not_a_chromium_error_page(check_page, tmp_path):
    with pytest.raises(FileNotFoundError, match="no page at"):
        check_page(tmp_path / "nowhere.html")


def test_the_skip_reason_says_what_is_missing_and_how_to_install_it():
    assert browser_unavailable(which=lambda name: f"/usr/bin/{name}", find_spec=lambda name: object()) is None
    reason = browser_unavailable(which=lambda name: None, find_spec=lambda name: None)
    assert reason.startswith("chromium, chromedriver, the selenium package not found: ")
    assert "apt-get install chromium chromium-driver" in reason and "pip install -e '.[test]'" in reason


def test_selenium_manager_is_never_asked_for_a_driver(tmp_path, monkeypatch):
    """Selenium Manager downloads a browser and a driver when it is not given one by path."""
    if reason := browser_unavailable():
        pytest.skip(reason)
    from selenium.webdriver.common.selenium_manager import SeleniumManager

    def refuse(*args, **kwargs):
        raise AssertionError("Selenium Manager was consulted")

    monkeypatch.setattr(SeleniumManager, "binary_paths", refuse)
    driver = start_chromium(tmp_path / "profile")
    try:
        assert driver.service.path == shutil.which("chromedriver")
        assert re.fullmatch(r"\d+(\.\d+)+", driver.capabilities["browserVersion"])
    finally:
        driver.quit()
