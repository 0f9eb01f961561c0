"""The session header on a real vLLM server: every request two vLLM members send for one
answer (opening the session, drafting, scoring on the cached route, accepting) carries the
answer's id, as a router with session affinity needs."""

from __future__ import annotations

import json

import pytest
from recording_proxy import recording_proxy

from specem_chain import Member, RequestSettings, open_request
from specem_chain.backends import loaded_backend

pytestmark = pytest.mark.vllm


async def test_every_request_of_an_answer_carries_its_id(vllm):
    with recording_proxy(vllm.url) as (proxy, seen):
        members = [Member.vllm(proxy, name=name) for name in ("one", "two")]
        for member in members:
            await loaded_backend(member).ready()
        seen.clear()
        messages = [{"role": "user", "content": "Name one thing about rivers."}]
        settings = RequestSettings(max_tokens=12, window=4, seed=0)
        async with open_request(members, messages, settings) as run:
            async for _ in run:
                pass
    answer = run.answer
    assert answer.rounds and not answer.dropped
    assert len(seen) >= 6
    assert {s.headers.get("x-session-id") for s in seen} == {answer.id}
    scored = [s for s in seen if "logprob_token_ids" in json.dumps(s.body)]
    assert scored, "no scoring request was seen"
