"""Ensembles of members on real servers: llama-cpp-python's server and the TGI test server."""

from __future__ import annotations

import asyncio
import logging

import pytest
from remote_servers import LlamaServer, tgi_server

from specem_chain import Member, Sampling, SpecEMChatModel
from specem_chain.backends.llamacpp import LlamaCppBackend, LlamaCppSession
from specem_chain.backends.openai_completions import OpenAICompletionsBackend
from specem_chain.backends.tgi import TGIBackend
from specem_chain.engine.types import Segment
from specem_chain.errors import MemberServerError, RequestError

pytestmark = pytest.mark.models  # servers on the built-in members

QUESTION = "Write two sentences about the sea."


def llama_member(server: LlamaServer, **settings: object) -> Member:
    return Member.openai_completions(
        server.url, tokenizer=str(server.folder), name="llama", **settings
    )


@pytest.mark.heavy  # a minute; two servers' members answering together are checked by default
# below (a member killed mid-answer), each kind of server by test_remote_parity.py
async def test_llamacpp_and_tgi_members_answer_together(smollm2_llama, tiny_tgi_url):
    llm = SpecEMChatModel(
        members=[llama_member(smollm2_llama), Member.tgi(tiny_tgi_url, name="tgi")],
        max_tokens=10,
        window=5,
        seed=0,
    )
    message = await llm.ainvoke(QUESTION)
    meta = message.response_metadata["specem"]
    assert message.content.strip()
    assert set(meta["wins"]) == {"llama", "tgi"}
    assert meta["dropped"] == {}
    assert all(u["input_tokens"] > 10 for u in meta["usage"].values())
    verified = [s for s in meta["segments"] if len(s["candidates"]) == 2]
    assert verified, "no round compared two candidates"
    for segment in verified:
        assert segment["verifiers"] == ["llama", "tgi"]
        for row in segment["scores"]:
            assert sum(row) == pytest.approx(1.0)


async def test_a_local_and_a_remote_copy_of_one_model_score_alike(tiny_tgi_url, tiny_models):
    """Same model, same template, same backend (the TGI server runs transformers): the TGI
    member's scores match the in-process member's, so the candidate's tokens and its
    end-of-turn token are mapped right over HTTP."""
    local = Member.local(str(tiny_models["llama"]), name="local", backend="transformers")
    llm = SpecEMChatModel(
        members=[local, Member.tgi(tiny_tgi_url, name="remote")],
        max_tokens=24,
        window=8,
        seed=3,
    )
    message = await llm.ainvoke(QUESTION)
    segments = message.response_metadata["specem"]["segments"]
    assert message.content.strip()
    compared = [s for s in segments if len(s["candidates"]) == 2]
    assert compared
    for segment in compared:
        local, remote = segment["scores"]
        assert local == pytest.approx(remote, abs=2e-3)


SEA = [{"role": "user", "content": QUESTION}]
CANDIDATES = [
    Segment(" The sea is deep and blue."),
    Segment("Waves roll in.", finished=True),
    Segment("Hello"),
]


@pytest.mark.parametrize(
    ("server", "lead"),
    [
        ("smollm2_llama", ""),
        pytest.param("qwen_llama", "<|endoftext|>", marks=pytest.mark.heavy),
    ],
)
async def test_a_llamacpp_server_member_scores_as_its_gguf_does_in_process(request, server, lead):
    """llama-cpp-python echoes each prompt token with the log-prob of the token after it
    unless the prompt starts with the model's BOS token. SmolLM2's chat prompts do (its BOS
    is <|im_start|>); Qwen2.5's do not, so that member leads its prompts with <|endoftext|>.
    Either way the server's scores are those of the same GGUF and prompt in process."""
    served: LlamaServer = request.getfixturevalue(server)
    # (Qwen's echo over its 151k tokens can take minutes on a busy machine; see below)
    member = Member.openai_completions(
        served.url, tokenizer=str(served.folder), request_timeout=600
    )
    remote = OpenAICompletionsBackend(member)
    session = await remote.open(SEA)
    assert remote.lead == lead
    local = LlamaCppBackend.load(Member(source=str(served.gguf), backend="llamacpp"))
    in_process = LlamaCppSession(local, lead + local.template.render(SEA))
    assert session.prompt_tokens == in_process.prompt_tokens
    expected = await in_process.score(CANDIDATES, "mean_logprob")
    got = await session.score(CANDIDATES, "mean_logprob")
    assert [s.tokens for s in got] == [s.tokens for s in expected]
    assert [s.mean for s in got] == pytest.approx([s.mean for s in expected], abs=0.05)


@pytest.mark.heavy
async def test_a_server_with_shifted_echo_logprobs_and_no_bos_to_lead_gets_a_clear_error(
    qwen_llama,
):
    template = qwen_llama.folder / "chat_template.jinja"
    # llama-cpp-python builds every echoed token's log-probs over the whole vocabulary in
    # Python: on a busy 2-core machine the probe's echo over Qwen's 151k tokens took 80 s,
    # past the default timeout, and a member that times out is dropped, not an error.
    member = Member.openai_completions(
        qwen_llama.url, chat_template=template.read_text(), request_timeout=600
    )
    llm = SpecEMChatModel(members=[member, "smollm2"], max_tokens=8)
    with pytest.raises(MemberServerError, match="do not belong to their tokens"):
        await llm.ainvoke("Hi")


async def test_a_member_killed_mid_answer_is_dropped_and_the_answer_completes(
    tiny_tgi_url, tiny_models, tmp_path
):
    with tgi_server(tmp_path, model=tiny_models["llama"]) as (doomed_url, process):
        llm = SpecEMChatModel(
            members=[
                Member.tgi(doomed_url, name="doomed", retries=1, request_timeout=10),
                Member.tgi(tiny_tgi_url, name="survivor"),
            ],
            max_tokens=24,
            window=6,
            seed=1,
        )
        chunks = []
        async for chunk in llm.astream(QUESTION):
            if not chunks:
                process.kill()
                process.wait()
            chunks.append(chunk)
    answer = sum(chunks[1:], chunks[0])
    meta = answer.response_metadata["specem"]
    assert len(chunks) > 1 and answer.content.strip()
    assert list(meta["dropped"]) == ["doomed"]
    assert "cannot reach" in meta["dropped"]["doomed"]
    assert meta["weights"]["doomed"] == 0.0
    later = meta["segments"][-1]
    assert later["verifiers"] == ["survivor"]
    assert [c["member"] for c in later["candidates"]] == ["survivor"]


async def test_concurrent_requests_equal_the_same_requests_alone(tiny_tgi_url):
    """16 requests at once over HTTP; each equals the same request made alone.

    Both members sit behind the TGI-protocol server, whose numbers do not depend on what
    else it is serving. (llama.cpp's do: its prompt-prefix cache changes how a prompt is
    batched, which moves its logits, so a llama-cpp-python member is reproducible alone but
    not bit-for-bit under concurrency.)
    """
    llm = SpecEMChatModel(
        members=[
            Member.tgi(tiny_tgi_url, name="cool"),
            Member.tgi(tiny_tgi_url, name="warm", sampling=Sampling(temperature=1.0)),
        ],
        max_tokens=12,
        window=6,
    )
    requests = [("Name a fruit.", 0), ("Say hello.", 1), ("What is 3+4?", 2), ("Hi!", 3)]
    alone = {r: provenance(await llm.ainvoke(r[0], seed=r[1])) for r in requests}
    together = await asyncio.gather(*(llm.ainvoke(q, seed=s) for q, s in requests * 4))
    assert len(together) == 16
    assert [provenance(m) for m in together] == [alone[r] for r in requests * 4]
    assert len({alone[r][0] for r in requests}) == len(requests)  # four different answers


def provenance(message) -> tuple:
    specem = message.response_metadata["specem"]
    return message.content, specem["segments"], specem["weights"]


@pytest.mark.parametrize(
    ("kind", "starts"),
    [
        ("tgi", "TGI scores each candidate by prefilling the whole context again"),
        ("openai", "an OpenAI-style server gives the log-probs of given tokens only by echoing"),
    ],
)
async def test_a_member_whose_server_rereads_the_context_to_score_says_so_once(
    request, kind, starts, caplog
):
    """Requests that start together on a new member: one line, whoever checks."""
    if kind == "tgi":
        backend = TGIBackend(Member.tgi(request.getfixturevalue("tiny_tgi_url"), name="m"))
    else:
        server: LlamaServer = request.getfixturevalue("smollm2_llama")
        member = Member.openai_completions(server.url, tokenizer=str(server.folder), name="m")
        backend = OpenAICompletionsBackend(member)
    with caplog.at_level(logging.WARNING, "specem_chain"):
        await asyncio.gather(*(backend.ready() for _ in range(3)))
        await backend.ready()
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"member 'm': {starts}") and "serve the model with vLLM" in line


async def test_a_tgi_server_without_prefill_logprobs_gets_a_clear_error(tmp_path, tiny_models):
    with tgi_server(tmp_path, "--no-prefill-logprobs", model=tiny_models["llama"]) as (url, _):
        llm = SpecEMChatModel(members=[Member.tgi(url, name="a"), "smollm2"], max_tokens=8)
        with pytest.raises(MemberServerError, match="--enable-prefill-logprobs"):
            await llm.ainvoke("Hi")


async def test_the_wrong_kind_of_server_gets_a_clear_error(smollm2_llama, tiny_tgi_url):
    root = smollm2_llama.url.removesuffix("/v1")
    wrong = SpecEMChatModel(members=[Member.tgi(root, name="x"), "smollm2"], max_tokens=8)
    with pytest.raises(MemberServerError, match="is not a TGI server"):
        await wrong.ainvoke("Hi")
    wrong = SpecEMChatModel(
        members=[Member.openai_completions(tiny_tgi_url, name="y"), "smollm2"], max_tokens=8
    )
    with pytest.raises(MemberServerError, match="is not an OpenAI-style API root"):
        await wrong.ainvoke("Hi")
    missing = SpecEMChatModel(
        members=[Member.openai_completions(smollm2_llama.url, model="nope"), "smollm2"],
        max_tokens=8,
    )
    with pytest.raises(MemberServerError, match="does not serve 'nope'"):
        await missing.ainvoke("Hi")


async def test_remote_members_refuse_logit_scoring(tiny_tgi_url):
    llm = SpecEMChatModel(
        members=[Member.tgi(tiny_tgi_url), "smollm2"], policy="paper", scoring="mean_logit"
    )
    with pytest.raises(RequestError, match="use scoring='mean_logprob'"):
        await llm.ainvoke("Hi")
