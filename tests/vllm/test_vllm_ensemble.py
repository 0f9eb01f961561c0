"""A mixed ensemble, an in-process llama.cpp member with a member on a real vLLM server,
through every front end that users serve with (LangChain, LlamaIndex, ``specem serve``), and
its faults: the server killed mid-answer, and the errors named before any member runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.llms.specem import SpecEM
from vllm_server import SERVED, free_port, vllm_server

from specem_chain import Member, RequestSettings, SpecEMChatModel, open_request
from specem_chain.backends.vllm import NO_LOGPROBS, VLLMBackend
from specem_chain.errors import EnsembleError, MemberServerError

pytestmark = pytest.mark.vllm

QUESTION = "Write two sentences about the sea."
SPECEM = Path(sys.executable).parent / "specem"
LOCAL = Member(source="smollm2", backend="llamacpp", name="local")


def members(url: str, **settings: object) -> list[Member]:
    """SmolLM2 in this process on llama.cpp (its Q4_1 GGUF) and on the vLLM server (float32)."""
    return [LOCAL, Member.vllm(url, name="vllm", **settings)]


def check_both_answered(meta: dict) -> None:
    assert meta["backends"] == {"local": "llamacpp", "vllm": "vllm (logprob_token_ids)"}
    assert meta["dropped"] == {}
    compared = [s for s in meta["segments"] if len(s["candidates"]) == 2]
    assert compared, "no round compared the two members' drafts"
    for segment in compared:
        assert segment["verifiers"] == ["local", "vllm"]
        assert {c["member"] for c in segment["candidates"]} == {"local", "vllm"}


async def test_a_mixed_ensemble_answers_through_langchain(vllm):
    llm = SpecEMChatModel(members=members(vllm.url), max_tokens=24, window=6, seed=0)
    message = await llm.ainvoke(QUESTION)
    assert message.content.strip()
    check_both_answered(message.response_metadata["specem"])
    again = await llm.ainvoke(QUESTION)
    assert again.content == message.content  # seeded on both members


def test_a_mixed_ensemble_answers_through_llamaindex(vllm):
    llm = SpecEM(members=members(vllm.url), max_tokens=24, window=6, seed=0)
    response = llm.chat([ChatMessage(role="user", content=QUESTION)])
    assert response.message.content.strip()
    check_both_answered(response.raw["specem"])
    assert response.raw["usage"]["prompt_tokens"] > 20


def test_specem_serve_with_two_workers_answers_over_one_port(vllm, tmp_path):
    """``specem serve --workers 2``: each worker holds its own in-process member and shares
    the vLLM server; requests at once are answered, each as the same request alone (the
    llama.cpp member unbatched: batched, an answer may differ slightly from itself alone)."""
    port = free_port()
    log = tmp_path / "serve.log"
    specs = ["-m", "smollm2", "-m", f"vllm+{vllm.url}#{SERVED}"]
    command = [str(SPECEM), "serve", *specs, "--port", str(port), "--workers", "2", "--no-batching"]
    with log.open("wb") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, log.read_text()
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"specem serve did not start: {log.read_text()}"
            time.sleep(0.5)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)

        def ask(seed: int) -> tuple[str, dict]:
            completion = client.chat.completions.create(
                model="specem",
                messages=[{"role": "user", "content": QUESTION}],
                max_tokens=16,
                seed=seed,
            )
            return completion.choices[0].message.content, completion.model_extra["specem"]

        alone = [ask(seed) for seed in (0, 1)]
        together = asyncio.run(_at_once(lambda s: asyncio.to_thread(ask, s), [0, 1, 0, 1]))
        assert [text for text, _ in together] == [alone[0][0], alone[1][0]] * 2
        for _, meta in alone:
            assert set(meta["backends"]) == {"smollm2", SERVED}
            assert meta["backends"][SERVED] == "vllm (logprob_token_ids)"
        workers = {
            line for line in log.read_text().splitlines() if "Started server process" in line
        }
        assert len(workers) == 2, log.read_text()
    finally:
        server.terminate()
        server.wait(timeout=60)


async def _at_once(call, seeds):
    return await asyncio.gather(*(call(s) for s in seeds))


async def test_a_vllm_server_killed_mid_answer_is_dropped_and_the_answer_completes(
    smollm2_folder, tmp_path
):
    with vllm_server(smollm2_folder, tmp_path, name=SERVED) as doomed:
        llm = SpecEMChatModel(
            members=members(doomed.url, retries=1, request_timeout=20),
            max_tokens=30,
            window=6,
            seed=1,
        )
        chunks = []
        async for chunk in llm.astream(QUESTION):
            if not chunks:
                doomed.kill()
            chunks.append(chunk)
    answer = sum(chunks[1:], chunks[0])
    meta = answer.response_metadata["specem"]
    assert len(chunks) > 1 and answer.content.strip()
    assert list(meta["dropped"]) == ["vllm"] and "cannot reach" in meta["dropped"]["vllm"]
    assert meta["weights"]["vllm"] == 0.0
    later = meta["segments"][-1]
    assert later["verifiers"] == ["local"] and [c["member"] for c in later["candidates"]] == [
        "local"
    ]


# -- errors before any member runs --------------------------------------------------------


async def refused_before_any_round(members: list[Member], **settings: object) -> Exception:
    """The error the request raises as it opens: no round has run, no member drafted."""
    request = open_request(
        members, [{"role": "user", "content": QUESTION}], RequestSettings(**settings)
    )
    with pytest.raises(Exception) as caught:
        await request.__aenter__()
    assert request.answer.rounds == []
    return caught.value


async def test_an_unreachable_vllm_server_is_named_before_any_member_runs():
    gone = Member.vllm("http://127.0.0.1:9", name="vllm", retries=0)
    error = await refused_before_any_round([LOCAL, gone], min_members=2)
    assert isinstance(error, EnsembleError)
    assert "vllm: cannot reach GET http://127.0.0.1:9/v1/models" in str(error)


async def test_a_model_the_server_does_not_serve_is_named_before_any_member_runs(vllm):
    wrong = Member.vllm(vllm.url, model="qwen-72b", name="vllm")
    error = await refused_before_any_round([LOCAL, wrong])
    assert isinstance(error, MemberServerError)
    assert "does not serve 'qwen-72b'" in str(error) and SERVED in str(error)


async def test_another_kind_of_server_is_named_before_any_member_runs(tmp_path):
    """An OpenAI-style server that is not vLLM (here: no /tokenize) is told apart."""
    port = free_port()
    app = (
        "from fastapi import FastAPI\nimport uvicorn\napp = FastAPI()\n"
        "@app.get('/v1/models')\ndef models(): return {'data': [{'id': 'm'}]}\n"
        f"uvicorn.run(app, host='127.0.0.1', port={port}, log_level='error')\n"
    )
    server = subprocess.Popen([sys.executable, "-c", app])
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        other = Member.vllm(f"http://127.0.0.1:{port}", name="vllm", retries=0)
        error = await refused_before_any_round([LOCAL, other])
        assert isinstance(error, MemberServerError)
        assert "is not a vLLM server" in str(error) and "openai+" in str(error)
    finally:
        server.terminate()
        server.wait()


class WithoutLogprobs(httpx.AsyncBaseTransport):
    """The real server's answers with every log-prob taken out: a server that returns
    none (a fault injected at the transport boundary)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        body = json.loads(response.content)
        for choice in body.get("choices", []) if isinstance(body, dict) else []:
            choice["prompt_logprobs"] = None
            choice["logprobs"] = None
        return httpx.Response(response.status_code, json=body)


async def test_a_server_without_log_probs_is_named_before_any_member_runs(vllm):
    backend = VLLMBackend(Member.vllm(vllm.url, name="vllm"))
    client = backend.client
    client._clients[asyncio.get_running_loop()] = httpx.AsyncClient(
        base_url=client.base_url, transport=WithoutLogprobs()
    )
    with pytest.raises(MemberServerError) as caught:
        await backend.ready()
    assert str(caught.value) == f"member 'vllm': {NO_LOGPROBS}"
    await client.aclose()
