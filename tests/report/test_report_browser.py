"""The provenance page in a real headless Chromium: hovering a segment shows its rivals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from specem_chain import report

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1100,900",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """Debian's chromium and chromium-driver (``./run`` installs them where it can);
    nothing is downloaded."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).is_file()]
    if missing:
        pytest.fail(
            f"{missing} not found: install Debian's Chromium and its driver with "
            "`sudo apt-get install -y --no-install-recommends chromium chromium-driver`",
            pytrace=False,
        )
    options = Options()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def words(text: str) -> str:
    return " ".join(text.split())


def test_hovering_a_segment_shows_the_losing_candidates_and_scores(
    browser, tiny_answer, tmp_path: Path
):
    page = tmp_path / "report.html"
    page.write_text(report(tiny_answer, question="How many clips?"), encoding="utf-8")
    browser.get(page.as_uri())

    segments = tiny_answer.response_metadata["specem"]["segments"]
    spans = browser.find_elements(By.CSS_SELECTOR, ".answer .seg")
    assert len(spans) == len(segments)
    # a round whose losing candidates have visible text, so the assertion can see them
    index, segment = next(
        (i, s)
        for i, s in enumerate(segments)
        if any(c["member"] != s["member"] and c["text"].strip() for c in s["candidates"])
    )
    tip = spans[index].find_element(By.CSS_SELECTOR, ".tip")
    assert not tip.is_displayed()

    ActionChains(browser).move_to_element(spans[index]).perform()

    assert tip.is_displayed()
    shown = words(tip.text)
    for candidate in segment["candidates"]:
        if candidate["member"] != segment["member"]:
            assert words(candidate["text"]) in shown
    for value in segment["scores"][0]:
        assert f"{value:.3f}" in shown
    assert "score matrix" in shown

    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).perform()
    assert not tip.is_displayed()


def test_the_weight_chart_draws_a_line_per_member(browser, tiny_answer, tmp_path: Path):
    page = tmp_path / "report.html"
    page.write_text(report(tiny_answer), encoding="utf-8")
    browser.get(page.as_uri())
    lines = browser.find_elements(By.CSS_SELECTOR, "svg.chart polyline")
    assert len(lines) == len(tiny_answer.response_metadata["specem"]["wins"])
    assert all(line.size["width"] > 100 for line in lines)
