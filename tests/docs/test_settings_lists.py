"""The pages that list the request settings by hand name every one of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specem_chain.request import RequestSettings

ROOT = Path(__file__).parents[2]
LISTS = [
    "docs/guides/langchain.md",
    "docs/guides/llamaindex.md",
    "docs/guides/lm-eval.md",
    "adapters/llama-index-llms-specem/README.md",
]
"""Each has one paragraph (or table row) that lists the settings; it names ``fast_finish``."""


@pytest.mark.parametrize("page", LISTS)
def test_the_settings_list_names_every_request_setting(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    listing = [p for p in re.split(r"\n\s*\n", text) if "`fast_finish`" in p]
    assert len(listing) == 1, f"{page}: expected one paragraph that lists the settings"
    named = set(re.findall(r"`(\w+)`", listing[0]))
    missing = [name for name in RequestSettings.model_fields if name not in named]
    assert missing == [], f"{page} does not name {missing}"
