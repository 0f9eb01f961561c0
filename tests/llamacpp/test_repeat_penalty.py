"""The repetition penalty in drafting: one rule (CTRL's) on both in-process backends."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from loading import loaded

from specem_chain.backends import llamacpp, transformers
from specem_chain.engine.types import REPEAT_LAST_N, Sampling
from specem_chain.members import Member


def llama_sampler(sampling: Sampling, history: list[int]):
    sampler = llamacpp.TokenSampler(len(LOGITS), sampling, 0, history)
    return lambda logits: sampler(np.asarray(logits, dtype=np.float32))


def torch_sampler(sampling: Sampling, history: list[int]):
    sampler = transformers.TokenSampler(sampling, 0, history)
    return lambda logits: sampler(torch.tensor(logits))


SAMPLERS = [llama_sampler, torch_sampler]
LOGITS = [3.0, 2.9, 1.0, -1.0, -1.05, 0.5]
GREEDY = Sampling(temperature=0.0, repeat_penalty=1.1)


@pytest.mark.parametrize("sampler", SAMPLERS, ids=["llamacpp", "transformers"])
def test_a_repeated_token_s_logit_is_divided_or_multiplied_by_the_penalty(sampler):
    assert sampler(GREEDY, [])(LOGITS) == 0
    assert sampler(GREEDY, [0])(LOGITS) == 1  # 3.0 / 1.1 < 2.9
    assert sampler(Sampling(temperature=0.0, repeat_penalty=1.0), [0])(LOGITS) == 0  # none
    negative = [-1.0, -1.05, -3.0]
    assert sampler(GREEDY, [0])(negative + [-9.0] * 3) == 1  # -1.0 * 1.1 < -1.05


@pytest.mark.parametrize("sampler", SAMPLERS, ids=["llamacpp", "transformers"])
def test_the_penalty_reads_the_latest_tokens_and_those_it_sampled(sampler):
    assert sampler(GREEDY, [0] + [5] * REPEAT_LAST_N)(LOGITS) == 0  # 0 is too far back
    draw = sampler(GREEDY, [])
    # Each seen token is penalised once, however often it was seen: 3.0/1.1 > 2.9/1.1.
    assert [draw(LOGITS), draw(LOGITS), draw(LOGITS)] == [0, 1, 0]


@pytest.mark.models
@pytest.mark.parametrize("backend", ["llamacpp", "transformers"])
async def test_a_draft_is_penalised_for_the_tokens_of_its_context(backend):
    """Greedy: "banana", in the prompt but not yet in the draft, is left out when penalised."""
    member = loaded(Member(source="smollm2", backend=backend))
    prompt = "Repeat exactly: banana banana banana banana"
    session = await member.open([{"role": "user", "content": prompt}])
    plain = await session.draft(8, Sampling(temperature=0.0, repeat_penalty=1.0), seed=0)
    penalised = await session.draft(8, Sampling(temperature=0.0, repeat_penalty=2.0), seed=0)
    await session.aclose()
    assert plain.text.count("banana") == 2
    assert "banana" not in penalised.text
