"""Continuous batching on llama.cpp: concurrent requests read in one batch per step, each
on a sequence of its own, and leave without disturbing the others."""

from __future__ import annotations

import asyncio
import json

import pytest
from loading import loaded
from typer.testing import CliRunner

from specem_chain.backends.batching import SEQUENCES, Batcher
from specem_chain.cli import app
from specem_chain.members import Member
from specem_chain.request import Answer, RequestSettings, open_request

pytestmark = pytest.mark.models


@pytest.fixture
def members(tiny_models) -> list[Member]:
    """SmolLM2 and a tiny random model, two models of different sizes, each batching on
    llama.cpp."""
    return [
        Member(source="smollm2", backend="llamacpp", batching=True),
        Member(source=str(tiny_models["gguf"]), backend="llamacpp", batching=True, name="tiny"),
    ]


QUESTIONS = [
    "What is the capital of France?",
    "Name a fruit that is yellow.",
    "Write one sentence about the sea.",
    "What is 7 times 6?",
]


def ask(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


async def answer(
    members: list[Member], question: str, *, max_tokens: int = 24, **settings
) -> Answer:
    settings = RequestSettings(max_tokens=max_tokens, seed=0, **settings)
    async with open_request(members, ask(question), settings) as request:
        async for _ in request:
            pass
    return request.answer


def batchers(members: list[Member]) -> list[Batcher]:
    found = [loaded(m).batcher for m in members]
    assert all(isinstance(b, Batcher) for b in found)
    return found


async def all_sequences_free(members: list[Member]) -> None:
    """Wait for the batchers to clear the sequences the finished requests freed."""
    for _ in range(200):
        if all(len(b.free) == SEQUENCES and not b.cleared for b in batchers(members)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"sequences still taken: {[b.free for b in batchers(members)]}")


@pytest.fixture
def step_sizes(monkeypatch) -> list[int]:
    """How many requests each batched step read for."""
    sizes: list[int] = []
    step = Batcher._step

    def counted(self, items):
        sizes.append(len({item.slot.seq for item in items if not item.slot.released}))
        return step(self, items)

    monkeypatch.setattr(Batcher, "_step", counted)
    return sizes


async def test_concurrent_requests_each_get_a_whole_answer_of_their_own(members, step_sizes):
    answers = await asyncio.gather(*(answer(members, q) for q in QUESTIONS))
    assert max(step_sizes) >= 2  # the requests did share steps
    for reply in answers:
        assert reply.text.strip() and reply.finish_reason in ("end_of_turn", "length")
        assert reply.text == "".join(s["text"] for s in reply.segments())
        # every round drafted by both members and verified by both, on their own sequences
        assert all({c.member for c in e.candidates} == set(reply.members) for e in reply.rounds)
        assert all(len(e.verifiers) == 2 for e in reply.rounds if e.verified)
        assert reply.backends == dict.fromkeys(reply.members, "llamacpp")
    texts = [reply.text for reply in answers]
    assert len(set(texts)) == len(texts)  # each answers its own question
    await all_sequences_free(members)


async def test_a_batched_answer_alone_is_reproducible(members):
    first, second = [await answer(members, QUESTIONS[2]) for _ in range(2)]
    assert first.text == second.text
    assert first.segments() == second.segments()


async def test_a_cancelled_request_frees_its_sequence_and_the_others_finish(members):
    async def cancelled() -> None:
        settings = RequestSettings(max_tokens=64, seed=0)
        async with open_request(members, ask(QUESTIONS[2]), settings) as request:
            async for update in request:
                if update.event.round >= 1:
                    raise asyncio.CancelledError  # as a client that hangs up

    others = [asyncio.ensure_future(answer(members, q)) for q in QUESTIONS[:2]]
    with pytest.raises(asyncio.CancelledError):
        await cancelled()
    for reply in await asyncio.gather(*others):
        assert reply.text.strip()
    await all_sequences_free(members)


async def test_a_failing_request_leaves_the_others_running(members):
    others = [asyncio.ensure_future(answer(members, q)) for q in QUESTIONS[:2]]
    with pytest.raises(TimeoutError, match="answer_timeout"):
        await answer(members, QUESTIONS[2], max_tokens=200, answer_timeout=0.5)
    for reply in await asyncio.gather(*others):
        assert reply.text.strip()
    await all_sequences_free(members)


async def test_more_requests_than_sequences_wait_for_one(members):
    questions = [f"Count to {n}." for n in range(SEQUENCES + 2)]
    answers = await asyncio.gather(*(answer(members, q, max_tokens=6) for q in questions))
    assert all(reply.text.strip() for reply in answers)
    await all_sequences_free(members)


def test_the_load_benchmark_compares_batched_and_unbatched_requests(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--member",
            "smollm2",
            "--concurrency",
            "1,2",
            "--length",
            "6",
            "--repeats",
            "1",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "load-llamacpp.json",
        "load-llamacpp.md",
        "load-llamacpp.png",
    ]
    written = json.loads((tmp_path / "load-llamacpp.json").read_text())
    assert written["modes"] == ["unbatched", "batched"]
    assert [(r["mode"], r["concurrency"]) for r in written["rows"]] == [
        ("unbatched", 1),
        ("batched", 1),
        ("unbatched", 2),
        ("batched", 2),
    ]
    for row in written["rows"]:
        assert 0 < row["answer_tokens"] <= 6 and row["tokens_per_s"] > 0
        assert 0 < row["first_segment_s"]["median"] <= row["latency_s"]["median"]
        assert row["latency_s"]["median"] <= row["latency_s"]["p95"] <= row["wall_s"] * 1.01
        assert row["peak_memory_mb"] > 0
    assert set(written["loaded_memory_mb"]) == {"unbatched", "batched"}
    assert "| batched | 2 |" in (tmp_path / "load-llamacpp.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "1,two"], "--concurrency takes request counts such as 1,2,4,8"),
        (["--concurrency", "0"], "--concurrency takes request counts"),
        (["--concurrency", "1", "--length", "4", "--length", "8"], "takes one --length"),
        (["--server", "http://127.0.0.1:9/v1"], "--server applies to the load benchmark"),
    ],
)
def test_load_benchmark_options_are_checked_before_any_member_loads(args, message):
    result = CliRunner().invoke(app, ["bench", "--member", "/no/such/model.gguf", *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
