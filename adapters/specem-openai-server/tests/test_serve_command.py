"""`specem serve` as a user runs it: a subprocess that any OpenAI client can talk to."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai

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


def test_specem_serve_without_this_package_names_the_install_command():
    """The core's CLI imports the adapter when serve starts; here the import fails as it
    does where the package is not installed."""
    script = (
        "import sys\n"
        "sys.modules['specem_openai_server'] = None  # importing it now raises ImportError\n"
        "from specem_chain.cli import app\n"
        "app(['serve', '--member', 'smollm2'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert (
        "error: serve needs the OpenAI-server adapter: pip install "
        "./adapters/specem-openai-server" in " ".join(result.stderr.split())
    )
