"""Members on llama.cpp: the same scores as transformers, seeded drafts, shared caches."""

from __future__ import annotations

import asyncio
import itertools
import os
import runpy
import subprocess
import sys
from pathlib import Path

import llama_cpp
import pytest
from langchain_core.messages import HumanMessage
from loading import LARGER, SMOLLM2, loaded
from reference_scoring import QUESTION

from specem_chain import SpecEMChatModel
from specem_chain.backends import forget_prompts, llamacpp, release
from specem_chain.backends.drafting import common_prefix
from specem_chain.backends.llamacpp import CHUNK, LlamaCppBackend
from specem_chain.engine.types import Segment
from specem_chain.members import Member, Sampling

pytestmark = pytest.mark.models


SCORE_TOLERANCE = 0.5
"""Mean log-probs, llama.cpp vs transformers on the dequantised weights in float32.
llama.cpp multiplies by the Q4_1 blocks with 8-bit quantised activations; measured on
SmolLM2: 0.30 at most (a single-token candidate), 0.01-0.06 for longer ones."""


async def test_scores_match_transformers_on_the_same_weights():
    llama = loaded(SMOLLM2)
    reference = loaded(Member(source="smollm2", backend="transformers"))
    assert isinstance(llama, LlamaCppBackend)
    sessions = [await llama.open(QUESTION), await reference.open(QUESTION)]
    assert sessions[0].ids == sessions[1].ids  # the same chat template and tokenizer
    for session in sessions:
        await session.accept(Segment(" Natalia sold"))
    candidates = [
        Segment(" 48 clips in April and half as many in May"),
        Segment(" clips"),  # a single token
        Segment(" The quick brown fox"),
        Segment(" She sold 48 clips in April, so 24 in May: 72 in all."),
        Segment(" 72", finished=True),  # scored with the end-of-turn token
        Segment("", finished=True),
    ]
    spans = [[s._candidate(c) for c in candidates] for s in sessions]
    assert spans[0] == spans[1]  # the same tokens, found by the same rule

    ours, theirs = [[x.mean for x in await s.score(candidates, "mean_logprob")] for s in sessions]

    assert max(abs(a - b) for a, b in zip(ours, theirs)) <= SCORE_TOLERANCE
    assert sorted(range(6), key=ours.__getitem__) == sorted(range(6), key=theirs.__getitem__)


@pytest.fixture
def reads(monkeypatch) -> list[int]:
    """How many tokens each of the SmolLM2 llama.cpp backend's reads took (the one loaded
    at the time, so a test may release it and load it again)."""
    counts: list[int] = []
    read = LlamaCppBackend._read

    def counted(backend, tokens, *, outputs):
        if backend is loaded(SMOLLM2):
            counts.append(len(tokens))
        return read(backend, tokens, outputs=outputs)

    monkeypatch.setattr(LlamaCppBackend, "_read", counted)
    return counts


async def test_a_request_reads_each_token_once(reads):
    backend = loaded(SMOLLM2)
    session = await backend.open(QUESTION)
    draft = await session.draft(6, Sampling(), 0)
    assert sum(reads) == len(session.ids) + draft.tokens - 1  # the last one predicts nothing
    reads.clear()
    candidates = [Segment(" 48 clips"), Segment(" 72")]
    [(drafted, _)] = session.drafted  # not the draft's start, so each must be read
    sequences = [session._candidate(c)[1] for c in candidates]
    assert all(seq[:1] != drafted[:1] for seq in sequences)
    await session.score(candidates, "mean_logprob")
    # per candidate: the context's last token (for its logits), then the candidate's tokens
    # but the last
    assert sum(reads) == sum(len(seq) for seq in sequences)
    accepted = await session.accept(candidates[0])
    reads.clear()
    await session.draft(1, Sampling(), 0)
    assert 0 < sum(reads) <= accepted  # the context before the accepted text is kept
    await session.aclose()


async def test_the_own_draft_is_scored_from_the_logits_it_was_drawn_from(reads):
    backend = loaded(SMOLLM2)
    session = await backend.open(QUESTION)
    draft = await session.draft(8, Sampling(), 0)
    [(tokens, _)] = session.drafted
    own = Segment(draft.text, draft.finished)
    cut = Segment(session._decode(tokens[:2]), finished=True)  # cut short, then ended
    assert session._candidate(cut) == (len(session.ids), [*tokens[:2], backend.turn_end])
    other = Segment(" Something else entirely")
    reads.clear()
    scores = [s.mean for s in await session.score([own, cut, other], "mean_logprob")]
    assert sum(reads) == len(session._candidate(other)[1])  # only the other candidate is read

    fresh = await backend.open(QUESTION)  # no draft: every candidate is read
    expected = [s.mean for s in await fresh.score([own, cut, other], "mean_logprob")]
    # one token at a time (drafting) or in one batch (reading): llama.cpp's sums round
    # differently (measured: 0.04 on a -13 score, 0.005 on the rest)
    assert scores == pytest.approx(expected, rel=0.01, abs=0.02)
    await session.accept(other)
    assert session.drafted == []
    for s in (session, fresh):
        await s.aclose()


async def test_two_drafts_of_one_round_are_each_scored_from_their_own_logits(reads):
    backend = loaded(SMOLLM2)
    session = await backend.open(QUESTION)
    hot = Sampling(temperature=1.0, top_p=1.0)
    drafts = [await session.draft(8, hot, seed) for seed in (1, 2)]
    assert drafts[0].text != drafts[1].text and len(session.drafted) == 2
    own = [Segment(d.text, d.finished) for d in drafts]
    other = Segment(" Something else entirely")
    reads.clear()
    scores = [s.mean for s in await session.score([*own, other], "mean_logprob")]
    assert sum(reads) == len(session._candidate(other)[1])  # only the other candidate is read
    fresh = await backend.open(QUESTION)
    expected = [s.mean for s in await fresh.score([*own, other], "mean_logprob")]
    assert scores == pytest.approx(expected, rel=0.01, abs=0.02)
    for s in (session, fresh):
        await s.aclose()


def test_released_models_are_freed_and_load_again_at_their_next_use():
    first = loaded(Member(source="smollm2", backend="llamacpp", batching=True))
    batcher = first.batcher
    release()
    assert first.llm._model.model is None  # freed now, not when the garbage is collected
    assert not batcher.thread.is_alive()
    again = loaded(Member(source="smollm2", backend="llamacpp", batching=True))
    assert again is not first and again.llm._model.model is not None


async def test_a_seeded_draft_is_reproducible():
    backend = loaded(SMOLLM2)
    hot = Sampling(temperature=1.0, top_p=1.0)
    first = await backend.open(QUESTION)
    drafts = [await first.draft(8, hot, 3) for _ in range(2)]
    other = await backend.open(QUESTION)  # takes the cache over, then gives it back
    drafts.append(await other.draft(8, hot, 3))
    drafts.append(await first.draft(8, hot, 3))
    assert len(set(drafts)) == 1
    assert len({await first.draft(8, hot, seed) for seed in range(6)}) > 1
    await first.aclose()
    await other.aclose()


RULES = {
    "role": "system",
    "content": " ".join(f"Rule {i}: answer in one short, plain sentence." for i in range(1, 25)),
}
"""A system prompt of several whole chunks, shared by the questions below."""


def ruled(question: str) -> list[dict]:
    return [RULES, {"role": "user", "content": question}]


async def test_a_request_reads_only_the_prompt_it_does_not_share_and_answers_as_alone(
    reads,
):
    """A new request keeps the whole chunks of the cache that its prompt shares with the
    request before it, reads the rest, and drafts and scores exactly as from an empty
    cache."""
    hot = Sampling(temperature=1.0, top_p=1.0)
    candidates = [Segment(" Paris"), Segment(" A banana", finished=True)]

    async def first_round(session) -> tuple:
        return await session.draft(8, hot, 3), await session.score(candidates, "mean_logprob")

    release()  # an empty cache
    alone = await first_round(await loaded(SMOLLM2).open(ruled("Name a yellow fruit.")))
    release()
    earlier = await loaded(SMOLLM2).open(ruled("What is the capital of France?"))
    await first_round(earlier)
    await earlier.aclose()
    backend = loaded(SMOLLM2)
    reads.clear()
    session = await backend.open(ruled("Name a yellow fruit."))
    draft = await session.draft(8, hot, 3)
    shared = common_prefix(earlier.ids, session.ids) // CHUNK * CHUNK
    assert shared >= 2 * CHUNK  # the rules fill whole chunks
    assert sum(reads) == len(session.ids) - shared + draft.tokens - 1
    assert (draft, await session.score(candidates, "mean_logprob")) == alone  # exactly
    await session.aclose()
    forget_prompts()  # as the speed benchmark and specem eval do before an answer they time
    reads.clear()
    cold = await backend.open(ruled("Name a yellow fruit."))
    assert await cold.draft(8, hot, 3) == draft
    assert sum(reads) == len(cold.ids) + draft.tokens - 1
    await cold.aclose()


async def test_requests_that_share_a_system_prompt_answer_together_as_alone(monkeypatch):
    model = SpecEMChatModel(members=[SMOLLM2], drafts=2, max_tokens=24, seed=0)
    questions = [ruled("What is the capital of France?"), ruled("Name a yellow fruit.")]
    alone = []
    for question in questions:
        release()  # each from an empty cache
        alone.append(await model.ainvoke(question))
    taken: list[int] = []
    take = LlamaCppBackend.take

    def spy(self, session):
        taken.append(id(session))
        take(self, session)

    monkeypatch.setattr(LlamaCppBackend, "take", spy)
    together = await asyncio.gather(*(model.ainvoke(q) for q in questions))
    assert sum(a != b for a, b in itertools.pairwise(taken)) >= 2  # they did interleave
    for one, other in zip(together, alone):
        assert one.content == other.content
        assert (
            one.response_metadata["specem"]["segments"]
            == (other.response_metadata["specem"]["segments"])
        )


@pytest.mark.heavy  # the benchmark's run; sharing a prompt is checked by the tests above
def test_the_shared_prompt_benchmark_asks_three_questions_on_one_sheet(monkeypatch, capsys):
    script = Path(__file__).parents[2] / "benchmarks" / "shared_prompt.py"
    monkeypatch.setattr(sys, "argv", [str(script), "-m", "smollm2", "--max-tokens", "4"])
    runpy.run_path(str(script), run_name="__main__")
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [row[0] for row in rows] == ["| 1", "| 2", "| 3"]
    prompts = [int(row[3]) for row in rows]
    assert prompts[0] == prompts[2] > 2 * CHUNK  # the sheet fills whole chunks


async def test_models_reading_at_the_same_time_share_the_cores(monkeypatch):
    monkeypatch.setattr(llamacpp, "THREADS", 4)
    backend = loaded(SMOLLM2)
    assert isinstance(backend, LlamaCppBackend)
    threads: list[int] = []
    read = backend._read

    def recorded(tokens, *, outputs):
        logits = read(tokens, outputs=outputs)
        if tokens:
            ctx = backend.llm.ctx
            threads.append((llama_cpp.llama_n_threads(ctx), llama_cpp.llama_n_threads_batch(ctx)))
        return logits

    monkeypatch.setattr(backend, "_read", recorded)
    session = await backend.open(QUESTION)
    with llamacpp._cores.share():  # another model is reading
        beside = await session.draft(6, Sampling(), 0)
    assert set(threads) == {(2, 4)}  # one-token steps on 2 threads, many tokens on 4
    threads.clear()
    alone = await session.draft(6, Sampling(), 0)
    assert set(threads) == {(4, 4)}
    assert alone == beside  # the thread count changes no number
    await session.aclose()


async def test_the_ensemble_answers_on_llamacpp_members():
    model = SpecEMChatModel(members=[SMOLLM2, LARGER], max_tokens=24, seed=0)
    reply = await model.ainvoke([HumanMessage(QUESTION[0]["content"])])
    segments = reply.response_metadata["specem"]["segments"]
    assert reply.content.strip()
    assert segments and "".join(s["text"] for s in segments) == reply.content
    assert {s["member"] for s in segments} <= {"smollm2", "larger"}


async def test_concurrent_requests_answer_as_they_do_alone(monkeypatch):
    model = SpecEMChatModel(members=[SMOLLM2, LARGER], max_tokens=16, seed=0)
    questions = [[HumanMessage("What is the capital of France?")], [HumanMessage("Name a fruit.")]]
    alone = [(await model.ainvoke(q)).content for q in questions]

    owners: dict[int, list[int]] = {}
    take = LlamaCppBackend.take

    def spy(self, session):
        owners.setdefault(id(self), []).append(id(session))
        take(self, session)

    monkeypatch.setattr(LlamaCppBackend, "take", spy)
    together = await asyncio.gather(*(model.ainvoke(q) for q in questions))

    switches = sum(a != b for calls in owners.values() for a, b in itertools.pairwise(calls))
    assert switches >= 2  # the two requests did interleave on a shared cache
    assert [r.content for r in together] == alone


async def test_a_mixed_ensemble_of_transformers_and_llamacpp_members():
    members = [Member(source="smollm2", backend="transformers"), LARGER]
    model = SpecEMChatModel(members=members, max_tokens=16, seed=0)
    reply = await model.ainvoke([HumanMessage(QUESTION[0]["content"])])
    assert reply.content.strip()
    assert reply.response_metadata["specem"]["segments"]
    backends = reply.response_metadata["specem"]["backends"]
    assert backends == {members[0].label: "transformers", LARGER.label: "llamacpp"}


@pytest.mark.parametrize(
    "members",
    [
        pytest.param(["smollm2"], id="smollm2"),
        # the default member (its reference design loads it in float32 on transformers)
        pytest.param([], id="the default ensemble", marks=pytest.mark.heavy),
    ],
)
def test_the_speed_benchmark_measures_members_on_llamacpp(tmp_path, members):
    import json

    from typer.testing import CliRunner

    from specem_chain.cli import app
    from specem_chain.cli_options import chosen_members

    measured = chosen_members(members)
    args = ["bench", *(a for m in members for a in ("-m", m)), "--backend", "llamacpp"]
    args += ["--length", "8", "--repeats", "1"]
    result = CliRunner().invoke(app, [*args, "--reference-repeats", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "speed-llamacpp.json",
        "speed-llamacpp.md",
        "speed-llamacpp.png",
    ]
    written = json.loads((tmp_path / "speed-llamacpp.json").read_text())
    assert written["backend"] == "llamacpp"
    (row,) = written["rows"]
    assert row["answer_tokens"]["min"] >= 8
    labels = [m.label for m in measured]
    assert written["members"] == labels and set(row["solo_seconds_per_token"]) == set(labels)
    assert written["drafts"] == {m.label: m.sampling.drafts for m in measured}
    assert all(v["min"] > 0 for v in row["solo_seconds_per_token"].values())
    assert row["overhead_ratio"]["min"] > 0 and row["vs_reference_ratio"]["min"] > 0
    assert "| 8 |" in (tmp_path / "speed-llamacpp.md").read_text()

    again = tmp_path / "again"
    earlier = str(tmp_path / "speed-llamacpp.json")
    result = CliRunner().invoke(app, [*args, "--reference-from", earlier, "--out", str(again)])
    assert result.exit_code == 0, result.output
    rerun = json.loads((again / "speed-llamacpp.json").read_text())
    assert rerun["reference_from"] == earlier
    assert rerun["rows"][0]["reference_seconds_per_token"] == row["reference_seconds_per_token"]


def test_eval_runs_built_in_members_on_llamacpp_by_default(tmp_path):
    """--backend auto (the default) resolves to llama.cpp here, and the run records it."""
    import json

    from typer.testing import CliRunner

    from specem_chain.cli import app

    data = tmp_path / "gsm8k.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "#### 5"}) + "\n")
    out = tmp_path / "out"
    args = ["eval", "--task", "gsm8k", "--data", str(data)]
    args += ["--systems", "member:qwen2.5-coder-1.5b-instruct,specem", "--max-tokens", "8"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "run.json").read_text())["backend"] == "llamacpp"
    assert set(json.loads((out / "summary.json").read_text())) == {
        "member:qwen2.5-coder-1.5b-instruct",
        "specem",
    }


def test_llamacpp_uses_the_cores_this_process_may_run_on():
    """Pinned to one core (two evaluations side by side, a container's CPU set), a process
    runs llama.cpp on one thread, not on every core of the machine."""
    script = "from specem_chain.backends import llamacpp; print(llamacpp.THREADS)"
    pinned = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )
    assert pinned.stdout.strip() == "1"
