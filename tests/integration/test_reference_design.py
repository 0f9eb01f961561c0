"""The benchmark's reference design must compute what our engine computes, only slower."""

from __future__ import annotations

import pytest
from reference_scoring import QUESTION

from specem_chain.backends.transformers import TransformersBackend
from specem_chain.benchmark.reference import ReferenceSession
from specem_chain.engine import EngineConfig, Seat, run_rounds
from specem_chain.engine.types import Segment
from specem_chain.members import Member


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
async def test_reference_scores_equal_inline_scores_with_cache(tiny_models, architecture):
    backend = TransformersBackend.load(Member.local(str(tiny_models[architecture])))
    ours, reference = await backend.open(QUESTION), ReferenceSession(backend, QUESTION)
    for segment in (Segment(" Natalia sold"), Segment(" 48 clips")):
        await ours.accept(segment)
        await reference.accept(segment)
    assert reference.context() == ours.ids
    candidates = [Segment(" in April"), Segment(" clips"), Segment(" 72", finished=True)]
    expected = await ours.score(candidates, "mean_logprob")
    got = await reference.score(candidates, "mean_logprob")
    assert [s.tokens for s in got] == [s.tokens for s in expected]
    assert max(abs(a.mean - b.mean) for a, b in zip(expected, got)) <= 1e-4


async def test_the_reference_design_runs_in_the_engine(tiny_models):
    members = [Member.local(str(tiny_models[name])) for name in ("llama", "qwen2")]
    seats = [
        Seat(m.label, ReferenceSession(TransformersBackend.load(m), QUESTION)) for m in members
    ]
    events = [e async for e in run_rounds(seats, EngineConfig(max_tokens=20, seed=1))]
    assert events[-1].finished
    assert all(len(e.scores) == 2 for e in events if e.verified)
