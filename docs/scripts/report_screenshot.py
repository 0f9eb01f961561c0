"""Make docs/img/report.png: a real answer's provenance page, one segment hovered.

    ./run python docs/scripts/report_screenshot.py

Needs Debian's chromium and chromium-driver (as .ci/run installs them) and the embedded
default ensemble.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from specem_chain import SpecEMChatModel, report

QUESTION = "Natalia sold 48 clips in April and half as many in May. How many in total?"
OUTPUT = Path(__file__).parents[1] / "img" / "report.png"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=960,900",
)


def main() -> None:
    # three drafters, so the weights move and each round has two rivals
    members = ["smollm2", "qwen2.5-coder", "gemma3"]
    message = SpecEMChatModel(members=members, max_tokens=64, seed=0).invoke(QUESTION)
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "report.html"
        page.write_text(report(message, question=QUESTION), encoding="utf-8")
        options = Options()
        options.binary_location = "/usr/bin/chromium"
        for flag in (*FLAGS, f"--user-data-dir={folder}/profile"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            driver.get(page.as_uri())
            segments = driver.find_elements(By.CSS_SELECTOR, ".answer .seg")
            ActionChains(driver).move_to_element(segments[min(2, len(segments) - 1)]).perform()
            driver.save_screenshot(str(OUTPUT))
        finally:
            driver.quit()
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
