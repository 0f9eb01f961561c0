"""The ensemble loop end to end on tiny random models (real transformers, real caches)."""

from __future__ import annotations

import math

import pytest

from specem_chain.answer_formats import AnswerOptions
from specem_chain.backends.drafting import MAX_CHARACTER_TOKENS
from specem_chain.errors import EnsembleError, PromptTooLongError
from specem_chain.members import Member
from specem_chain.request import Answer, RequestSettings, open_request

QUESTION = [{"role": "user", "content": "How many clips did Natalia sell altogether?"}]


async def run(members: list[Member], messages=QUESTION, stop=(), **settings) -> Answer:
    options = AnswerOptions(stop=stop)
    async with open_request(members, messages, RequestSettings(**settings), options) as request:
        async for _ in request:
            pass
    return request.answer


@pytest.fixture
def pair(tiny_models) -> list[Member]:
    return [Member.local(str(tiny_models["llama"])), Member.local(str(tiny_models["qwen2"]))]


async def test_every_round_is_a_well_formed_event(pair):
    answer = await run(pair, seed=3, max_tokens=40, window=6)
    assert answer.rounds and answer.rounds[-1].finished
    assert all(not e.finished for e in answer.rounds[:-1])
    for event in answer.rounds:
        names = [c.member for c in event.candidates]
        assert event.winner in names
        assert event.segment in [c.text for c in event.candidates]
        assert len(event.scores) == len(event.verifiers) == 2
        assert all(len(row) == len(event.candidates) for row in event.scores)
        assert all(math.isclose(sum(row), 1.0) for row in event.scores)
        assert math.isclose(sum(event.weights.values()), 1.0)
        # the window, plus at most MAX_CHARACTER_TOKENS to finish a split character
        assert all(c.tokens <= 6 + MAX_CHARACTER_TOKENS for c in event.candidates)
    assert answer.text == "".join(e.segment for e in answer.rounds)
    usage = answer.usage()
    assert usage["input_tokens"] == sum(answer.prompt_tokens.values()) > 0
    assert usage["output_tokens"] == sum(answer.drafted_tokens.values())


async def test_a_seed_makes_the_answer_reproducible(pair):
    first = await run(pair, seed=11, max_tokens=30)
    again = await run(pair, seed=11, max_tokens=30)
    assert first.text == again.text
    assert [e.winner for e in first.rounds] == [e.winner for e in again.rounds]


async def test_length_limit_ends_the_answer(pair):
    answer = await run(pair, seed=5, max_tokens=12, window=5)
    if answer.finish_reason == "length":
        assert answer.rounds[-1].answer_tokens >= 12
    else:  # a member ended its turn first
        assert answer.finish_reason == "end_of_turn"
        assert answer.rounds[-1].answer_tokens < 12


async def test_one_member_degenerates_to_that_model(tiny_models):
    solo = [Member.local(str(tiny_models["qwen2"]))]
    answer = await run(solo, seed=2, max_tokens=30)
    assert all(not e.verified for e in answer.rounds)
    assert all(e.winner == solo[0].label for e in answer.rounds)
    assert answer.weights == {solo[0].label: 1.0}


async def test_a_verify_only_member_scores_but_never_drafts(tiny_models):
    members = [
        Member.local(str(tiny_models["llama"])),
        Member.local(str(tiny_models["qwen2"]), role="verifier"),
    ]
    answer = await run(members, seed=4, max_tokens=20)
    for event in answer.rounds:
        assert [c.member for c in event.candidates] == ["llama"]
    # it renders the whole conversation, question included, like every member
    assert answer.prompt_tokens["qwen2"] > 0


async def test_stop_sequence_cuts_the_answer_exactly(pair):
    free = await run(pair, seed=7, max_tokens=40)
    # a stop text that straddles the first two segments
    first = free.rounds[0].segment
    assert len(free.rounds) > 1 and first
    stop = first[-1] + free.rounds[1].segment[:2]
    expected = free.text[: free.text.index(stop)]
    stopped = await run(pair, seed=7, max_tokens=40, stop=(stop,))
    assert stopped.text == expected
    assert stopped.finish_reason == "stop_sequence"
    assert stop not in stopped.text


async def test_fast_finish_accepts_a_finished_draft_unverified(tiny_models):
    members = [Member.local(str(tiny_models["qwen2"])), Member.local(str(tiny_models["llama"]))]
    answer = await run(members, seed=0, max_tokens=60, fast_finish=True)
    last = answer.rounds[-1]
    if last.finish_reason == "end_of_turn":
        assert not last.verified
        assert any(c.finished and c.member == last.winner for c in last.candidates)


async def test_a_plain_model_without_template_takes_part(tiny_models):
    members = [Member.local(str(tiny_models["plain"])), Member.local(str(tiny_models["qwen2"]))]
    answer = await run(members, seed=1, max_tokens=20)
    assert answer.prompt_tokens["plain"] > 0 and answer.rounds


async def test_prompt_longer_than_a_members_context_is_refused(pair):
    long = [{"role": "user", "content": "clips " * 400}]
    with pytest.raises(PromptTooLongError, match="context holds 256"):
        await run(pair, long)


async def test_members_must_have_distinct_names(tiny_models):
    twice = [Member.local(str(tiny_models["qwen2"]))] * 2
    with pytest.raises(EnsembleError, match="unique"):
        await run(twice)


async def test_members_may_run_in_another_dtype(tiny_models):
    members = [
        Member.local(str(tiny_models["llama"]), dtype="bfloat16"),
        Member.local(str(tiny_models["qwen2"])),
    ]
    answer = await run(members, seed=8, max_tokens=16)
    assert answer.rounds and all(len(e.scores) == 2 for e in answer.rounds if e.verified)


async def test_a_gguf_file_is_a_member_on_either_in_process_backend(tiny_models):
    """One GGUF, read by transformers' GGUF loader (dequantized) and by llama.cpp."""
    gguf = str(tiny_models["gguf"])
    members = [Member(source=gguf, backend=b, name=b) for b in ("transformers", "llamacpp")]
    answer = await run(members, seed=0, max_tokens=16, window=4)
    assert answer.backends == {"transformers": "transformers", "llamacpp": "llamacpp"}
    assert any(e.verified for e in answer.rounds)
    assert all(len(e.scores) == 2 for e in answer.rounds if e.verified)


async def test_warm_up_loads_every_member_before_the_first_request(tiny_models):
    from specem_chain.backends import registry
    from specem_chain.models import resolve
    from specem_chain.request import warm_up

    members = [Member.local(str(tiny_models["plain"]), name="warm")]
    key = registry.key(resolve(members[0]))
    registry._backends.pop(key, None)
    await warm_up(members)
    assert key in registry._backends
    loaded = registry._backends[key]
    await warm_up(members)
    assert registry._backends[key] is loaded  # loaded once, shared


async def test_bad_request_input_is_a_value_error_before_any_member_runs(pair):
    from specem_chain.errors import RequestError

    for members, messages in (([], QUESTION), (pair, [])):
        with pytest.raises(RequestError) as caught:
            await run(members, messages)
        assert isinstance(caught.value, ValueError)
