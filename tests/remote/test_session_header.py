"""The session header: every request a remote member sends for one answer carries the
answer's id (``X-Session-ID`` by default), so that a router with session affinity keeps the
answer on one replica of the member's server. Checked on what real servers receive, through
a proxy that records each request: the TGI test server, and llama-cpp-python's
OpenAI-style server (vLLM's: tests/vllm/test_vllm_session_header.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from recording_proxy import Seen, recording_proxy
from remote_servers import LlamaServer

from specem_chain import Answer, Member, RequestSettings, open_request
from specem_chain.backends import loaded_backend

PROMPTS = {
    "apples": "Name one thing about apples.",
    "rivers": "Name one thing about rivers.",
}


async def answered(members: list[Member], prompt: str) -> Answer:
    settings = RequestSettings(max_tokens=12, window=4, seed=0, repeat_penalty=1.0)
    messages = [{"role": "user", "content": prompt}]
    async with open_request(members, messages, settings) as run:
        async for _ in run:
            pass
    return run.answer


@pytest.fixture(
    # llama-cpp-python echoes every prompt token's log-prob, built in Python: two answers
    # beside each other take it about two minutes on two busy cores
    params=["tgi", pytest.param("openai", marks=pytest.mark.heavy)]
)
def remote(request: pytest.FixtureRequest) -> tuple[str, Callable[[str], Member]]:
    """A member's server (its address) and how to make a member of it at another address
    (a proxy's)."""
    if request.param == "tgi":
        return request.getfixturevalue("tiny_tgi_url"), lambda at: Member.tgi(at, name="remote")
    server: LlamaServer = request.getfixturevalue("smollm2_llama")

    def member(at: str) -> Member:
        folder = str(server.folder)
        return Member.openai_completions(f"{at}/v1", tokenizer=folder, name="remote")

    return server.url.removesuffix("/v1"), member


async def test_every_request_of_an_answer_carries_its_id(remote, tiny_models):
    """Two answers at once, beside a member in this process: each request the remote member
    sends, to open its session, draft, score and accept, names its own answer (the answer
    whose prompt it carries); the server's first check belongs to no answer."""
    upstream, make = remote
    with recording_proxy(upstream) as (proxy, seen):
        member = make(proxy)
        await loaded_backend(member).ready()
        assert seen and not any("x-session-id" in s.headers for s in seen)
        seen.clear()

        local = Member(source=str(tiny_models["llama"]), name="local")
        answers = await asyncio.gather(
            *(answered([member, local], prompt) for prompt in PROMPTS.values())
        )
    ids = [a.id for a in answers]
    assert len(set(ids)) == 2 and all(len(i) == 32 for i in ids)
    assert all(a.rounds and a.backends["remote"] != "local" for a in answers)
    by_answer: dict[str, list[Seen]] = {i: [] for i in ids}
    for request in seen:
        by_answer[request.headers["x-session-id"]].append(request)  # KeyError: no or another
    for answer, prompt in zip(answers, PROMPTS.values()):
        mine = by_answer[answer.id]
        assert len(mine) >= 3  # its session opened, a draft and a scoring at least
        for request in mine:
            text = json.dumps(request.body)
            other = next(p for p in PROMPTS.values() if p != prompt)
            assert prompt in text and other not in text


async def test_the_header_has_the_name_each_member_gives_it_or_none(tiny_tgi_url, tiny_models):
    with (
        recording_proxy(tiny_tgi_url) as (named_url, named),
        recording_proxy(tiny_tgi_url) as (quiet_url, quiet),
    ):
        members = [
            Member.tgi(named_url, name="named", session_header="X-Affinity-Key"),
            Member.tgi(quiet_url, name="quiet", session_header=None),
        ]
        answer = await answered(members, PROMPTS["apples"])
    assert answer.rounds and not answer.dropped
    opened = [s for s in named if s.path == "/chat_tokenize" and "apples" in json.dumps(s.body)]
    assert opened, "the named member's session was not seen opening"
    since = named.index(opened[0])
    assert all(s.headers.get("x-affinity-key") == answer.id for s in named[since:])
    assert not any("x-session-id" in s.headers for s in named)
    assert len(quiet) > 3
    assert not any(h in s.headers for s in quiet for h in ("x-session-id", "x-affinity-key"))
