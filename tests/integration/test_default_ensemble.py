"""The embedded default ensemble: two model families writing one answer together."""

from __future__ import annotations

import json

import pytest
from loading import loaded
from reference_scoring import QUESTION, separate_scores
from typer.testing import CliRunner

from specem_chain.cli import app
from specem_chain.engine.types import Segment
from specem_chain.members import Member
from specem_chain.models import DEFAULT_MEMBERS, gguf_path

pytestmark = pytest.mark.models

NATALIA = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
    "clips in May. How many clips did Natalia sell altogether?"
)


@pytest.mark.parametrize("name", DEFAULT_MEMBERS)
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


def test_the_default_ensemble_answers_with_both_families_drafting_and_verifying():
    result = CliRunner().invoke(app, ["chat", NATALIA, "--json", "--seed", "0"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["text"].strip()
    assert answer["members"] == list(DEFAULT_MEMBERS)
    assert "".join(s["text"] for s in answer["segments"]) == answer["text"]
    for segment in answer["segments"]:  # who wins is the policy's business; all take part
        assert [c["member"] for c in segment["candidates"]] == list(DEFAULT_MEMBERS)
        assert segment["verifiers"] == list(DEFAULT_MEMBERS)
    assert answer["finish_reason"] in ("end_of_turn", "length")


async def test_a_member_loads_straight_from_a_gguf_file():
    path = gguf_path("smollm2")
    backend = loaded(Member(source=str(path), backend="transformers"))
    assert backend.model.config.model_type == "llama"
    session = await backend.open(QUESTION)
    draft = await session.draft(4, Member(source=str(path)).sampling, 0)
    assert draft.tokens > 0
