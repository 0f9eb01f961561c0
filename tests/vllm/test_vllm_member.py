"""The vLLM member against a real vLLM server, beside the same model in this process
(transformers, the same float32 folder): the same prompt, the same context after the same
segments, the same scores, drafts and token counts; seeds that reproduce; provenance that
says how the server scored; and scoring that reads the server's prefix cache, on every
route the member knows alike."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from loading import loaded
from sessions import accept_alike
from vllm_server import SERVED, VLLMServer

from specem_chain import Member, SpecEMChatModel
from specem_chain.backends.vllm import ROUTES, VLLMBackend
from specem_chain.engine.types import Sampling, Segment

pytestmark = pytest.mark.vllm

QUESTION = [{"role": "user", "content": "Write two lines about the sea."}]
CANDIDATES = [
    Segment("\n\nThe end."),  # its first token merges with the context's last one
    Segment("\n"),
    Segment(" Blue waves.", finished=True),
    Segment("", finished=True),  # "stop here": the end-of-turn token alone
]
SCORE_TOLERANCE = 1e-3
"""Mean log-prob, vLLM against transformers on the same float32 weights (measured: 3e-6)."""


def in_process() -> object:
    return loaded(Member(source="smollm2", backend="transformers"))


async def test_the_member_needs_only_the_address_and_learns_the_rest(vllm):
    backend = VLLMBackend(Member.vllm(vllm.url))
    await backend.ready()
    assert backend.model == SERVED  # the server's only model
    assert backend.max_model_len == 2048
    assert backend.end_of_turn == "<|im_end|>" and len(backend.end_of_turn_ids) == 1
    assert backend.route == "logprob_token_ids"
    assert not backend.plain and not backend.native_tools  # SmolLM2's template has no tools
    assert (await VLLMBackend(Member.vllm(f"{vllm.url}/v1/")).count(QUESTION)) == (
        await backend.count(QUESTION)
    )


async def test_a_vllm_session_holds_the_same_context_and_scores_as_an_in_process_one(vllm):
    local = await in_process().open(QUESTION)
    remote = await VLLMBackend(Member.vllm(vllm.url)).open(QUESTION)
    assert remote.prompt_tokens == local.prompt_tokens
    await accept_alike(local, remote)
    ours, theirs = [await s.score(CANDIDATES, "mean_logprob") for s in (local, remote)]
    assert [s.tokens for s in ours] == [s.tokens for s in theirs]
    assert [s.mean for s in theirs] == pytest.approx([s.mean for s in ours], abs=SCORE_TOLERANCE)
    await local.aclose()


LONG = [
    {
        "role": "user",
        "content": "Timetable. "
        + " ".join(
            f"Ferry {i} leaves pier {i % 7 + 1} at {i % 12 + 1} o'clock for {town}."
            for i, town in enumerate(["Oslo", "Kiel", "Riga", "Turku", "Visby"] * 19)
        )
        + " Which ferry leaves pier 3 first?",
    }
]
"""A context of about 1,750 tokens: more than ten of the CPU build's 128-token blocks."""

LONG_CANDIDATES = [
    Segment(" Ferry 2 leaves pier 3 at 3 o'clock."),
    Segment(" The first one is ferry 9", finished=False),
    Segment(" Ferry 2.", finished=True),
    Segment("", finished=True),
]


def prompt_tokens(server: VLLMServer) -> dict[str, float]:
    """The server's own counts of prompt tokens, computed and read from its cache."""
    found = {}
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:prompt_tokens_by_source_total{"):
            source = line.split('source="')[1].split('"')[0]
            found[source] = float(line.rsplit(" ", 1)[1])
    return found


@pytest.mark.parametrize("route", [r for r in ROUTES if r != "prompt_logprobs"])
async def test_every_route_scores_as_prompt_logprobs_does_after_a_long_context(vllm, route):
    """As in a round, the context is drafted from (read once, into the server's prefix cache)
    before its candidates are scored. Scored cold, every prompt of a cached route's request
    computes the whole context again, side by side in one step (a prompt's blocks are cached
    once computed, not while): on one CPU core that took longer than the member's 60 s
    timeout, three times, and the member was dropped. The re-reading routes (the truth's
    ``prompt_logprobs`` and ``echo``) still read the whole context once per candidate, by
    design: the member's timeout is one a slower machine than CI's passes too."""
    backend = VLLMBackend(Member.vllm(vllm.url, request_timeout=600))
    session = await backend.open(LONG)
    assert session.prompt_tokens > 10 * 128
    backend.block = None  # no switching to the cheaper route: the route as set scores
    await session.accept(Segment(" Ferry 2 leaves"))
    await session.draft(1, Sampling(temperature=0.0), seed=0)
    backend.route = "prompt_logprobs"
    truth = await session.score(LONG_CANDIDATES, "mean_logprob")
    backend.route = route
    found = await session.score(LONG_CANDIDATES, "mean_logprob")
    assert [s.tokens for s in found] == [s.tokens for s in truth]
    assert [s.mean for s in found] == pytest.approx([s.mean for s in truth], abs=1e-3)


async def test_scoring_computes_the_candidates_last_blocks_not_the_context(vllm):
    """After the context has been read once (a draft), the cached route computes only each
    of the candidate's prefixes' last, partial block (the CPU build's blocks are 128
    tokens), however long the context; ``prompt_logprobs`` computes the whole context again
    for the same scores."""
    backend = VLLMBackend(Member.vllm(vllm.url))
    session = await backend.open(LONG)
    assert backend.block == 128  # the CPU build's, from its /metrics
    backend.block = None  # the route as set scores
    await session.draft(4, Sampling(temperature=0.0), seed=0)
    candidate = [LONG_CANDIDATES[0]]
    spent = {}
    for route in ("logprob_token_ids", "prompt_logprobs"):
        backend.route = route
        before = prompt_tokens(vllm)
        [score] = await session.score(candidate, "mean_logprob")
        after = prompt_tokens(vllm)
        spent[route] = after["local_compute"] - before["local_compute"]
    partial = len(session.ids) % 128  # the context's tokens after its last whole block
    assert spent["logprob_token_ids"] <= score.tokens * (partial + score.tokens)
    assert spent["prompt_logprobs"] >= len(session.ids)


async def test_after_a_context_shorter_than_a_block_a_round_re_reads_as_that_computes_less(
    vllm,
):
    """After a short question (under one 128-token block, nothing cached to read) each of a
    candidate's prefixes would be computed whole: the member re-reads instead, one prompt a
    candidate, with the scores of the cached route."""
    backend = VLLMBackend(Member.vllm(vllm.url))
    session = await backend.open(QUESTION)
    await session.draft(4, Sampling(temperature=0.0), seed=0)
    candidates = [Segment(" The sea is wide and grey, it sings"), Segment(" Waves.", True)]
    before = prompt_tokens(vllm)
    chosen = await session.score(candidates, "mean_logprob")
    spent = prompt_tokens(vllm)["local_compute"] - before["local_compute"]
    assert len(session.ids) + sum(s.tokens for s in chosen) < 128
    assert spent <= 2 * len(session.ids) + sum(s.tokens for s in chosen) + 2  # one read each
    backend.block = None  # the cached route, as set
    before = prompt_tokens(vllm)
    cached = await session.score(candidates, "mean_logprob")
    assert prompt_tokens(vllm)["local_compute"] - before["local_compute"] > 2 * spent
    assert [s.tokens for s in chosen] == [s.tokens for s in cached]
    assert [s.mean for s in chosen] == pytest.approx([s.mean for s in cached], abs=1e-3)


class OlderServer(httpx.AsyncBaseTransport):
    """The real server, sent each request without the fields an older vLLM does not know
    (and ignores): a fault injected at the transport boundary."""

    def __init__(self, *unknown: str) -> None:
        self.unknown = unknown
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            body = json.loads(request.content)
            for name in self.unknown:
                body.pop(name, None)
            request = httpx.Request("POST", request.url, json=body)
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize(
    ("unknown", "route"),
    [
        (("logprob_token_ids",), "allowed_token_ids"),
        (("logprob_token_ids", "allowed_token_ids"), "prompt_logprobs"),
    ],
)
async def test_a_server_without_the_cached_routes_is_found_out_and_said_once(
    vllm, unknown, route, caplog
):
    backend = VLLMBackend(Member.vllm(vllm.url, name="old"))
    client = backend.client
    client._clients[asyncio.get_running_loop()] = httpx.AsyncClient(
        base_url=client.base_url, transport=OlderServer(*unknown)
    )
    with caplog.at_level(logging.WARNING, "specem_chain"):
        await backend.ready()
        await backend.ready()
    assert backend.route == route
    said = [r.getMessage() for r in caplog.records]
    if route == "prompt_logprobs":
        [line] = said
        assert line.startswith("member 'old': ") and "re-reads the whole context" in line
        assert "logprob_token_ids" in line and "\n" not in line
    else:
        assert said == []
    session = await backend.open(QUESTION)
    scores = await session.score(CANDIDATES, "mean_logprob")
    assert all(s.mean < 0 for s in scores)
    await client.aclose()


@pytest.mark.parametrize(
    ("question", "window"),
    [("Write two lines about the sea.", 12), ("Answer with one word: what colour is the sky?", 40)],
)
async def test_greedy_drafts_end_and_count_as_the_in_process_ones(vllm, question, window):
    """The second draft ends its turn: finished, the end-of-turn token counted and not
    written, as in this process."""
    messages = [{"role": "user", "content": question}]
    local = await in_process().open(messages)
    remote = await VLLMBackend(Member.vllm(vllm.url)).open(messages)
    greedy = Sampling(temperature=0.0, repeat_penalty=1.0)
    ours, theirs = [await s.draft(window, greedy, seed=0) for s in (local, remote)]
    assert (theirs.text, theirs.finished, theirs.tokens) == (ours.text, ours.finished, ours.tokens)
    assert ours.finished == (window == 40) and "<|im_end|>" not in theirs.text
    await local.aclose()


async def test_a_seed_reproduces_a_sampled_draft(vllm):
    session = await VLLMBackend(Member.vllm(vllm.url)).open(QUESTION)
    hot = Sampling(temperature=1.2, top_p=1.0)
    again = [(await session.draft(10, hot, seed=s)).text for s in (5, 5, 6, 7, 8)]
    assert again[0] == again[1]
    assert len(set(again)) > 1, "five seeds, one draft: the seed does not reach the server"


async def test_an_answer_says_where_the_member_ran_and_how_it_scored(vllm):
    llm = SpecEMChatModel(members=[f"vllm+{vllm.url}#{SERVED}"], max_tokens=12, seed=0)
    message = await llm.ainvoke("Say hello.")
    meta = message.response_metadata["specem"]
    assert meta["backends"] == {SERVED: "vllm (logprob_token_ids)"}
    assert message.content and meta["usage"][SERVED]["input_tokens"] > 0
    assert message.usage_metadata["input_tokens"] == meta["usage"][SERVED]["input_tokens"]
    assert message.usage_metadata["output_tokens"] >= meta["answer_tokens"] > 0
