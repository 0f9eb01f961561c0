"""The vLLM member against a real vLLM server, beside the same model in this process
(transformers, the same float32 folder): the same prompt, the same context after the same
segments, the same scores, drafts and token counts; seeds that reproduce; and provenance
that says how the server scored."""

from __future__ import annotations

import pytest
from loading import loaded
from sessions import accept_alike
from vllm_server import SERVED

from specem_chain import Member, SpecEMChatModel
from specem_chain.backends.vllm import VLLMBackend
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
    assert backend.route == "prompt_logprobs"
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


async def test_both_ways_of_asking_for_prompt_log_probs_score_alike(vllm):
    by_prompt_logprobs = await VLLMBackend(Member.vllm(vllm.url)).open(QUESTION)
    echoing = VLLMBackend(Member.vllm(vllm.url))
    await echoing.ready()
    echoing.route = "echo"  # as for a server without prompt_logprobs
    by_echo = await echoing.open(QUESTION)
    scores = [await s.score(CANDIDATES, "mean_logprob") for s in (by_prompt_logprobs, by_echo)]
    assert [s.tokens for s in scores[0]] == [s.tokens for s in scores[1]]
    assert [s.mean for s in scores[0]] == pytest.approx([s.mean for s in scores[1]], abs=1e-5)


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
    assert meta["backends"] == {SERVED: "vllm (prompt_logprobs)"}
    assert message.content and meta["usage"][SERVED]["input_tokens"] > 0
    assert message.usage_metadata["input_tokens"] == meta["usage"][SERVED]["input_tokens"]
    assert message.usage_metadata["output_tokens"] >= meta["answer_tokens"] > 0
