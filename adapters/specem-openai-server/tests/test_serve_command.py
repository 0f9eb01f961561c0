"""`specem serve` as a user runs it: a subprocess that any OpenAI client can talk to."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import httpx
import openai
import pytest
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
        (["--policy", "best"], "--policy: Input should be 'paper', 'pool' or 'peer'"),
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
