"""API keys, as a client and an operator meet them: the OpenAI client and LangChain's
``ChatOpenAI`` with the key where each takes it; no answer, and no member asked, without it;
the key never written anywhere; a key file read again on SIGHUP."""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI
from openai_server_harness import serve
from specem_chain import Member, RequestSettings
from test_serve_command import SPECEM, free_port

from specem_openai_server.cli import loopback
from specem_openai_server.keys import ApiKeys, KeysError

KEY = "sk-specem-test-0f8e2d9c41b7a6"
OTHER = "sk-specem-test-77aa00ff13"
UNREACHABLE = Member.tgi("http://127.0.0.1:9", retries=0)
"""A member that fails if it is ever asked: nothing listens on port 9."""
HI = [{"role": "user", "content": "Hi"}]


def test_keys_accept_a_bearer_of_one_of_them_and_nothing_else(tmp_path):
    file = tmp_path / "keys"
    file.write_text(f"# the team's keys\n\n  {OTHER}  \n")
    keys = ApiKeys([KEY], file)
    assert keys.required and len(keys) == 2
    assert keys.accepts(f"Bearer {KEY}") and keys.accepts(f"bearer {OTHER}")
    for wrong in (None, "", KEY, f"Basic {KEY}", f"Bearer {KEY[:-1]}", f"Bearer {KEY}x", "Bearer "):
        assert not keys.accepts(wrong), wrong
    assert not ApiKeys().required
    shared = ApiKeys.from_shared(keys.shared())
    assert shared.accepts(f"Bearer {KEY}") and shared.accepts(f"Bearer {OTHER}")
    assert KEY not in str(keys.shared())  # a worker gets the key's digest, not the key


def test_a_key_file_that_cannot_be_used_is_refused_naming_the_file_not_a_key(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("# no key yet\n")
    with pytest.raises(KeysError, match="holds no key"):
        ApiKeys(file=empty)
    with pytest.raises(KeysError, match="cannot read the key file"):
        ApiKeys(file=tmp_path / "missing")
    with pytest.raises(KeysError, match="may not be blank"):
        ApiKeys([" "])


def test_a_reload_takes_the_files_new_keys_and_keeps_the_old_where_it_cannot(tmp_path, caplog):
    file = tmp_path / "keys"
    file.write_text(f"{KEY}\n")
    keys = ApiKeys(file=file)
    file.write_text(f"{OTHER}\n")
    keys.reload()
    assert keys.accepts(f"Bearer {OTHER}") and not keys.accepts(f"Bearer {KEY}")
    file.write_text("")
    keys.reload()  # an emptied file would open the server: the keys stay
    assert keys.accepts(f"Bearer {OTHER}")
    assert "not reloaded" in caplog.text and OTHER not in caplog.text


@pytest.fixture(scope="module")
def keyed(tiny_models):
    members = [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
    with serve(members, RequestSettings(max_tokens=8), keys=ApiKeys([KEY])) as base:
        yield base


def test_the_openai_client_with_the_key_gets_an_answer_and_without_it_a_401(keyed):
    answer = openai.OpenAI(base_url=f"{keyed}/v1", api_key=KEY, max_retries=0)
    assert answer.chat.completions.create(model="specem", messages=HI).choices[0].message.content
    assert answer.models.list().data
    for key in (OTHER, KEY + "x"):
        client = openai.OpenAI(base_url=f"{keyed}/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as caught:
            client.chat.completions.create(model="specem", messages=HI)
        assert caught.value.body["code"] == "invalid_api_key"
        assert "not one of this server's keys" in caught.value.body["message"]
        with pytest.raises(openai.AuthenticationError):
            client.models.list()
    bare = httpx.post(f"{keyed}/v1/chat/completions", json={"messages": HI})
    assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
    assert "needs an API key" in bare.json()["error"]["message"]


def test_langchains_chat_openai_with_the_key_answers_and_without_it_fails(keyed):
    llm = ChatOpenAI(base_url=f"{keyed}/v1", api_key=KEY, model="specem", max_retries=0)
    assert llm.invoke("Hi").content
    wrong = ChatOpenAI(base_url=f"{keyed}/v1", api_key=OTHER, model="specem", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.invoke("Hi")


def test_probes_stay_open_and_metrics_count_the_refusals(keyed):
    assert httpx.get(f"{keyed}/health").status_code == 200
    assert httpx.get(f"{keyed}/ready").status_code == 200
    before = refused(keyed)
    for _ in range(3):
        assert httpx.get(f"{keyed}/v1/models").status_code == 401
    assert refused(keyed) == before + 3


def refused(base: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("specem_rejected_total{reason="))
    lines = [x for x in text.splitlines() if 'reason="invalid_api_key"' in x and "_total" in x]
    assert line and len(lines) == 1
    return float(lines[0].split()[-1])


def test_without_the_key_no_member_is_asked_and_metrics_may_need_it_too():
    """The only member is unreachable: asking it would be a 503, not a 401."""
    with serve([UNREACHABLE], keys=ApiKeys([KEY]), metrics_need_key=True) as base:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=OTHER, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="specem", messages=HI)
        assert httpx.get(f"{base}/metrics").status_code == 401
        keyed = {"Authorization": f"Bearer {KEY}"}
        assert httpx.get(f"{base}/metrics", headers=keyed).status_code == 200


def test_no_key_is_written_in_logs_errors_or_metrics_even_at_debug(tiny_models, caplog):
    caplog.set_level(logging.DEBUG)
    members = [str(tiny_models["llama"])]
    with serve(
        members, RequestSettings(max_tokens=8), log_level="debug", keys=ApiKeys([KEY])
    ) as base:
        seen = []
        for key in (KEY, OTHER, KEY[:-2]):
            headers = {"Authorization": f"Bearer {key}"}
            for path, body in (("/v1/chat/completions", {"messages": HI}), ("/v1/models", None)):
                response = httpx.request(
                    "POST" if body else "GET", f"{base}{path}", json=body, headers=headers
                )
                seen.append(response.text)
        seen.append(httpx.get(f"{base}/metrics").text)
    assert any("chat.completion" in text for text in seen)  # the right key was answered
    assert any("http" in r.name or "uvicorn" in r.name for r in caplog.records)  # DEBUG seen
    for secret in (KEY, OTHER, KEY[:-2]):
        assert secret not in caplog.text
        assert all(secret not in text for text in seen)


def test_an_open_server_beyond_loopback_warns_once_at_start(tiny_models, monkeypatch):
    """Without a key, one warning line; with keys from SPECEM_SERVE_API_KEY, none."""
    assert loopback("127.0.0.1") and loopback("::1") and loopback("localhost")
    assert not loopback("0.0.0.0") and not loopback("10.1.2.3") and not loopback("specem.internal")
    command = [SPECEM, "serve", "-m", str(tiny_models["llama"]), "--host", "0.0.0.0"]
    open_port, keyed_port = free_port(), free_port()
    opened = first_lines([*command, "--port", str(open_port)])
    monkeypatch.setenv("SPECEM_SERVE_API_KEY", f"{KEY} {OTHER}")
    keyed = first_lines([*command, "--port", str(keyed_port)])
    warning = [line for line in opened if line.startswith("warning: no API key")]
    assert len(warning) == 1, opened
    assert "--host 0.0.0.0" in warning[0] and f"port {open_port}" in warning[0]
    assert "API keys: 2; /v1/ needs one\n" in keyed and not any("warning" in x for x in keyed)


def first_lines(command: list[str]) -> list[str]:
    """The first two lines ``specem serve`` writes to its standard error, then stop it."""
    server = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        return [server.stderr.readline() for _ in range(2)]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_sighup_reads_the_key_file_again_in_every_worker(tiny_models, tmp_path):
    """Two workers: the supervisor passes the SIGHUP on, and each worker reloads; a key
    revoked in the file is refused, whichever worker answers, and a new one is taken."""
    file = tmp_path / "keys"
    file.write_text(f"{KEY}\n")
    port = free_port()
    log = tmp_path / "serve.log"
    command = [SPECEM, "serve", "-m", str(tiny_models["llama"]), "--max-tokens", "4"]
    command += ["--api-key-file", str(file), "--workers", "2", "--port", str(port)]
    with log.open("wb") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for(lambda: log.read_text().count("Application startup complete") == 2, server, log)
        assert statuses(base, KEY) == {200}
        file.write_text(f"{OTHER}\n")
        server.send_signal(signal.SIGHUP)
        wait_for(lambda: log.read_text().count("API keys reloaded") == 2, server, log)
        assert statuses(base, KEY) == {401}
        assert statuses(base, OTHER) == {200}
        assert server.poll() is None  # reloaded, not restarted
        assert log.read_text().count("Application startup complete") == 2
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert KEY not in log.read_text() and OTHER not in log.read_text()


def statuses(base: str, key: str) -> set[int]:
    """The statuses of a few requests, each on a connection of its own (which the kernel
    gives to either worker)."""
    headers = {"Authorization": f"Bearer {key}"}
    return {httpx.get(f"{base}/models", headers=headers).status_code for _ in range(8)}


def wait_for(done, server: subprocess.Popen, log: Path, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert server.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
