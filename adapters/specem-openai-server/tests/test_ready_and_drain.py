"""Readiness and the graceful drain, as an operator meets them: ``/ready`` over a member on
a server that goes away and comes back, and ``specem serve`` stopped by a SIGTERM while it
streams an answer."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from openai_server_harness import serve
from remote.remote_servers import TGI_TEST_SERVER, running
from specem_chain import Member, RequestSettings
from specem_chain.backends.registry import loaded_backend
from test_serve_command import SPECEM, free_port

from specem_openai_server.readiness import RECENT_S, probe


def ready(base: str) -> tuple[int, dict]:
    response = httpx.get(f"{base}/ready", timeout=30)
    return response.status_code, response.json()


def test_ready_answers_503_while_a_member_on_a_server_is_down_and_200_once_it_is_back(
    tiny_models, tmp_path
):
    """Two members, both needed (min_members=2): one in this process, one on a TGI server
    that is down, then up, then stopped again; ``/health`` stays 200 throughout."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    members = [Member.tgi(url, name="remote", retries=0), Member(source=str(tiny_models["qwen2"]))]
    with serve(members, RequestSettings(min_members=2)) as base:
        status, body = ready(base)
        assert status == 503, body
        assert body["status"] == "unready"
        assert (body["ready_members"], body["min_members"]) == (1, 2)
        remote, local = body["members"]
        assert (remote["member"], remote["ready"], remote["runs_on"]) == ("remote", False, "tgi")
        assert "cannot reach" in remote["error"]
        assert (local["member"], local["ready"]) == ("qwen2", True)
        assert local["runs_on"] == "transformers"

        command = [sys.executable, str(TGI_TEST_SERVER), str(tiny_models["llama"])]
        with running([*command, "--port", str(port)], f"{url}/health", tmp_path / "tgi.log"):
            status, body = ready(base)
            assert status == 200, body
            assert body["status"] == "ready" and body["ready_members"] == 2
            assert body["members"][0] == {"member": "remote", "ready": True, "runs_on": "tgi"}

        status, body = ready(base)
        assert status == 503, body
        assert body["members"][0]["ready"] is False
        assert httpx.get(f"{base}/health").status_code == 200


async def test_a_busy_member_is_ready_while_it_answers_and_a_gone_one_is_not(
    tiny_models, tmp_path, monkeypatch
):
    """A probe that times out (the server busy: injected at the probe's transport) leaves a
    member ready while its server answered an answer's request in the last RECENT_S
    seconds, and not after; a server that is gone is not ready however recent its answer."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    member = Member.tgi(url, name="remote", retries=0)
    backend = loaded_backend(member)
    command = [sys.executable, str(TGI_TEST_SERVER), str(tiny_models["llama"])]
    with running([*command, "--port", str(port)], f"{url}/health", tmp_path / "tgi.log"):
        await backend.ready()  # the first check's requests are answers
        assert (await probe(member))["ready"]

        async def busy(path: str, timeout: float) -> None:
            raise TimeoutError(f"GET {url}{path}: no answer in {timeout:g} s")

        monkeypatch.setattr(backend.client, "probe", busy)
        assert (await probe(member))["ready"]
        backend.client.answered_at -= RECENT_S
        found = await probe(member)
        assert not found["ready"] and "no answer in" in found["error"]
        monkeypatch.undo()
    backend.client.answered_at = time.monotonic()
    found = await probe(member)
    assert not found["ready"] and "cannot reach" in found["error"]


@contextmanager
def specem_serve(args: list[str], log: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """``specem serve ARGS`` on a free port until it is ready: its base URL and process."""
    port = free_port()
    with log.open("wb") as sink:
        command = [SPECEM, "serve", *args, "--port", str(port)]
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"specem serve did not start: {log.read_text()}"
            try:
                if httpx.get(f"{base}/ready").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield base, server
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=30)


LONG_ANSWER = {
    "model": "specem",
    "messages": [{"role": "user", "content": "Tell me a long story."}],
    "max_tokens": 180,
    "seed": 0,
    "stream": True,
}
"""An answer of over a hundred rounds (a window of one token), streamed: a second or two
on the tiny members, whose context is 256 tokens."""


def events(lines: Iterator[str]) -> Iterator[str]:
    for line in lines:
        if line.startswith("data: "):
            yield line.removeprefix("data: ")


def wait_until_draining(base: str) -> dict:
    """The refusal of a new request once the server drains (``/ready`` says so first)."""
    deadline = time.monotonic() + 10
    while ready(base)[0] != 503:
        assert time.monotonic() < deadline, "the server did not start draining"
        time.sleep(0.05)
    status, body = ready(base)
    assert (status, body["status"]) == (503, "draining")
    body = {"model": "specem", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    refused = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    return refused.json()


def tiny_serve_args(tiny_models, *extra: str) -> list[str]:
    members = ["-m", str(tiny_models["llama"]), "-m", str(tiny_models["qwen2"])]
    return [*members, "--window", "1", "--repeat-penalty", "1", *extra]


def test_sigterm_drains_specem_serve_the_stream_in_flight_finishes(tiny_models, tmp_path):
    """A SIGTERM while an answer streams: the answer streams on to its end, a new request
    is refused with 503 and Retry-After, and the server exits once the answer is done."""
    args = tiny_serve_args(tiny_models, "--drain-seconds", "120")
    with specem_serve(args, tmp_path / "serve.log") as (base, server):
        url = f"{base}/v1/chat/completions"
        with httpx.stream("POST", url, json=LONG_ANSWER, timeout=120) as response:
            assert response.status_code == 200
            stream = events(response.iter_lines())
            first = json.loads(next(stream))
            assert first["choices"][0]["delta"]["role"] == "assistant"
            server.send_signal(signal.SIGTERM)
            refused = wait_until_draining(base)
            assert refused["error"]["code"] == "server_shutting_down"
            assert refused["error"]["type"] == "service_unavailable"
            metrics = httpx.get(f"{base}/metrics").text  # still served while draining
            assert 'specem_requests_total{outcome="draining"} 1.0' in metrics
            rest = list(stream)
        assert rest[-1] == "[DONE]"
        chunks = [json.loads(event) for event in rest[:-1]]
        assert not any("error" in chunk for chunk in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop")
        assert sum(1 for chunk in chunks if chunk.get("specem")) >= 10  # rounds after it
        server.wait(timeout=15)  # the drain ends as its last answer does


def test_an_answer_still_streaming_at_the_drain_deadline_ends_with_an_error_event(
    tiny_models, tmp_path
):
    """``--workers 2 --drain-seconds 0``: the supervisor passes the SIGTERM on to its
    workers; the answer that outlasts the drain ends with an error event the client reads,
    not a silent close, and the server exits soon after."""
    args = tiny_serve_args(tiny_models, "--drain-seconds", "0", "--workers", "2")
    with specem_serve(args, tmp_path / "serve.log") as (base, server):
        url = f"{base}/v1/chat/completions"
        with httpx.stream("POST", url, json=LONG_ANSWER, timeout=120) as response:
            assert response.status_code == 200
            stream = events(response.iter_lines())
            next(stream)
            server.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            rest = list(stream)
        last = json.loads(rest[-1])
        assert last["error"]["code"] == "server_shutting_down"
        assert "cut at the end of its 0 s drain" in last["error"]["message"]
        assert not any(event == "[DONE]" for event in rest)
        server.wait(timeout=20)
        assert time.monotonic() - signalled < 15
