"""`specem serve` as a user runs it: a subprocess that any OpenAI client can talk to."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from specem_chain import Feedback
from specem_chain.cli import PLUGINS, app
from typer.testing import CliRunner

SPECEM = str(Path(sys.executable).parent / "specem")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_specem_serve_answers_openai_clients(tiny_models):
    port = free_port()
    members = ["--member", str(tiny_models["llama"]), "--member", str(tiny_models["qwen2"])]
    server = subprocess.Popen(
        [SPECEM, "serve", *members, "--port", str(port), "--repeat-penalty", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "specem serve did not start"
                time.sleep(0.2)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        completion = client.chat.completions.create(
            model="specem", messages=[{"role": "user", "content": "Hi"}], max_tokens=8
        )
        assert completion.choices[0].message.content
        assert completion.model == "specem[llama, qwen2]"
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextmanager
def specem_serve(args: Sequence[str], log: Path, workers: int) -> Iterator[tuple[str, list[int]]]:
    """``specem serve ARGS`` on a free port, its output in ``log``, once its ``workers``
    have started: its base URL and its workers' process ids."""
    port = free_port()
    with log.open("wb") as sink:
        command = [SPECEM, "serve", *args, "--port", str(port), "--workers", str(workers)]
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while log.read_text().count("Application startup complete") < workers:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"specem serve did not start: {log.read_text()}"
            time.sleep(0.2)
        started = re.findall(r"Started server process \[(\d+)\]", log.read_text())
        yield f"http://127.0.0.1:{port}", [int(pid) for pid in started]
    finally:
        server.terminate()
        server.wait(timeout=60)


@contextmanager
def answering(worker: int, workers: Sequence[int]) -> Iterator[None]:
    """The other workers stopped for the block, so that ``worker`` takes its requests (one
    stopped past uvicorn's 5 s health check is replaced: then it is gone)."""
    others = [pid for pid in workers if pid != worker]
    with suppress(ProcessLookupError):
        for pid in others:
            os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in others:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def ask(base: str, seed: int) -> dict[str, Any]:
    """One answer's provenance (a new connection: any worker may take it)."""
    message = {"role": "user", "content": "How many clips?"}
    body = {"model": "specem", "messages": [message], "max_tokens": 16, "seed": seed}
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["specem"]


def test_the_workers_share_one_feedback_store_that_outlives_the_server(tiny_models, tmp_path):
    """``specem serve --workers 2 --feedback PATH``: the workers answer in turn (the other
    one stopped), each answer starting from the weights the answer before left in the store,
    whichever worker recorded it; the server started again starts from them too."""
    store, names = tmp_path / "tasks.db", ["llama", "qwen2"]
    members = [arg for name in names for arg in ("-m", str(tiny_models[name]))]
    args = [*members, "--feedback", str(store), "--task", "clips"]
    expected = Feedback()  # the same answers, recorded one after another in this process
    with specem_serve(args, tmp_path / "first.log", workers=2) as (base, workers):
        assert len(workers) == 2
        for seed, worker in enumerate(workers * 2):
            with answering(worker, workers):
                answer = ask(base, seed)
            assert answer["start_weights"] == pytest.approx(expected.weights(names))
            expected.record(answer["weights"], answer["dropped"])
    stored = Feedback.open(store, "clips").to_json()
    assert stored["answers"] == 4
    assert stored["log_weights"] == pytest.approx(expected.to_json()["log_weights"])

    with specem_serve(args, tmp_path / "again.log", workers=1) as (base, _):
        answer = ask(base, 4)
    assert answer["start_weights"] == pytest.approx(expected.weights(names))
    assert answer["start_weights"] != {"llama": 0.5, "qwen2": 0.5}
    assert Feedback.open(store, "clips").answers == 5
    said = "".join(f"feedback: {store}, task clips (4 answers)".split())
    assert said in "".join((tmp_path / "again.log").read_text().split())


def test_specem_serve_with_a_bad_member_exits_with_a_clear_error():
    result = subprocess.run(
        [SPECEM, "serve", "--member", "/no/such/model", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "error: member path '/no/such/model' does not exist" in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeat-penalty", "3"], "--repeat-penalty: Input should be"),
        (["--loop-penalty", "0.5"], "--loop-penalty: Input should be"),
        (["--window", "0"], "--window: Input should be greater than or equal to 1"),
        (["--policy", "best"], "--policy: Input should be 'paper', 'pool', 'peer' or 'anchor'"),
        (["--task", "maths"], "--task: give --feedback too"),
        (["--feedback", "tasks.json"], "--feedback: 'tasks.json' names a JSON feedback file"),
        (["--feedback", "/no/such/folder/tasks.db"], "--feedback: folder '/no/such/folder' does"),
    ],
)
def test_bad_server_settings_are_one_line_errors_before_any_member_loads(args, message):
    result = CliRunner().invoke(app, ["serve", "-m", "/no/such/model", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())


def test_specem_finds_serve_by_its_entry_point_and_says_what_to_install_without_it():
    """Where this package is not installed, the core's ``specem serve`` names it, whatever
    it is given, and exits 2."""
    assert any(e.value == "specem_openai_server.cli:serve" for e in entry_points(group=PLUGINS))
    script = (
        "import importlib.metadata as metadata\n"
        "found = metadata.entry_points\n"
        "metadata.entry_points = lambda **kw: [] if kw.get('group') == "
        f"{PLUGINS!r} else found(**kw)\n"
        "from specem_chain.cli import app\n"
        "app(['serve', '--member', 'smollm2', '--port', '1'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert (
        "error: serve needs the OpenAI-server adapter: pip install "
        "./adapters/specem-openai-server" in " ".join(result.stderr.split())
    )
