"""The built-in chat members on transformers, and the embedded default member under the
``rerank`` preset: drafting two candidates a round and choosing between them."""

from __future__ import annotations

import json

import pytest
from loading import loaded
from reference_scoring import QUESTION, separate_scores
from typer.testing import CliRunner

from specem_chain.cli import app
from specem_chain.engine.types import Segment
from specem_chain.members import Member
from specem_chain.models import DEFAULT_MEMBERS

CHAT_MODELS = [
    "smollm2-135m-instruct",
    pytest.param("qwen2.5-coder-0.5b-instruct", marks=pytest.mark.heavy),
]

pytestmark = pytest.mark.models

NATALIA = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether?"
)


@pytest.mark.parametrize("name", CHAT_MODELS)
async def test_inline_scores_equal_separate_scores_on_the_real_members(name):
    backend = loaded(Member(source=name, backend="transformers"))
    assert backend.model.config.model_type in ("llama", "qwen2")
    session = await backend.open(QUESTION)
    candidates = [
        Segment(" She sold 48 clips in April"),
        Segment(" 72"),
        Segment(" So"),
        Segment(" The answer is 72.", finished=True),
    ]
    encoded = [session._candidate(c)[1] for c in candidates]
    assert min(len(e) for e in encoded) == 1
    inline = [s.mean for s in await session.score(candidates, "mean_logprob")]
    separate = separate_scores(backend, session.ids, encoded, "mean_logprob")
    assert max(abs(a - b) for a, b in zip(inline, separate)) <= 1e-4


def test_the_rerank_preset_drafts_two_candidates_a_round_on_the_default_member():
    [qwen] = DEFAULT_MEMBERS
    assert qwen.sampling.drafts == 1
    args = ["chat", NATALIA, "--json", "--seed", "0", "--max-tokens", "64", "--preset", "rerank"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["text"].strip()
    assert answer["members"] == [qwen.label]
    assert "".join(s["text"] for s in answer["segments"]) == answer["text"]
    for segment in answer["segments"]:  # two drafts, or one when both were the same text
        assert [c["member"] for c in segment["candidates"]] in ([qwen.label] * 2, [qwen.label])
        assert segment["verifiers"] == [qwen.label]
    assert any(len(s["candidates"]) == 2 for s in answer["segments"])
    assert answer["finish_reason"] in ("end_of_turn", "length")
