"""The docs' code: Python comes from examples/ (run by tests/examples), and every shell
command parses as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from specem_chain.cli import app

ROOT = Path(__file__).parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^```\{?\.?(\w+)\}?\n(.*?)^```", re.M | re.S)
"""A fenced block; ``{.python}`` is how the pages spell Python, so that ruff's Markdown
formatter leaves the snippet lines alone."""


def blocks(language: str) -> list[tuple[str, str]]:
    return [
        (page.relative_to(ROOT).as_posix(), body)
        for page in PAGES
        for lang, body in FENCE.findall(page.read_text(encoding="utf-8"))
        if lang == language
    ]


def commands() -> list[tuple[str, list[str]]]:
    """Every command line in the docs' bash blocks, split as the shell splits it."""
    found = []
    for page, body in blocks("bash"):
        for line in body.splitlines():
            words = shlex.split(re.sub(r"(^|\s)#.*$", "", line))  # as the shell, not shlex
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value before the command
            if words and words[-1] == "&":
                words = words[:-1]
            if words:
                found.append((page, words))
    return found


def test_python_on_the_pages_is_included_from_examples():
    inline = [
        page
        for page, body in blocks("python")
        if not re.fullmatch(r'--8<-- "examples/[\w/]+\.py(:\w+)?"\n', body)
    ]
    assert inline == [], "python blocks must include a tested file from examples/"


def test_every_included_example_is_run_by_a_test():
    included = {
        match.group(1)
        for page in PAGES
        for match in re.finditer(r'--8<-- "examples/(\w+)\.py', page.read_text(encoding="utf-8"))
    }
    files = [*(ROOT / "tests").rglob("test_*.py"), *(ROOT / "adapters").rglob("test_*.py")]
    tests = " ".join(p.read_text(encoding="utf-8") for p in files)
    untested = [name for name in sorted(included) if f"from {name} import" not in tests]
    assert untested == []


SPECEM = [(page, words) for page, words in commands() if "specem" in words[:2]]


@pytest.mark.parametrize(("page", "words"), SPECEM, ids=[" ".join(w) for _, w in SPECEM])
def test_specem_commands_parse(page, words):
    """Each `specem` command names real subcommands and options with valid values, and
    the data files it reads are in the checkout."""
    data = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--data"]
    assert [d for d in data if not (ROOT / d).is_file()] == []
    words = words[words.index("specem") + 1 :]
    command = typer.main.get_command(app)
    name = "specem"
    while hasattr(command, "commands"):  # a group (typer ships its own click)
        name, words = words[0], words[1:]
        command = command.get_command(command.context_class(command), name)
        assert command is not None, f"{page}: no subcommand {name!r}"
    assert not hasattr(command, "commands")
    command.make_context(name, list(words))  # raises a UsageError on a bad option or value


def test_run_python_commands_name_existing_files():
    scripts = [
        (page, words[words.index("python") + 1])
        for page, words in commands()
        if "python" in words and not words[words.index("python") + 1].startswith("-")
    ]
    assert scripts, "the docs run examples"
    missing = [(page, script) for page, script in scripts if not (ROOT / script).is_file()]
    assert missing == []


def test_the_docs_show_the_report_screenshot():
    assert (ROOT / "docs/img/report.png").stat().st_size > 10_000
    assert "../img/report.png" in (ROOT / "docs/guides/provenance.md").read_text()
