"""Part (a) of the GPU check: what the CPU tests check of the in-process path, on tiny random
members built offline by the tests' own builder (tests/tiny_models.py), run on the device in
its dtype (bfloat16 on CUDA, float32 on the CPU).

- in-line verification scores every candidate as scoring it on its own does
  (tests/integration/test_inline_verification.py), within :func:`tolerance`;
- the KV cache is reused: after rounds of drafting, verifying and accepting it equals a fresh
  read; accepting a verified candidate runs no forward pass; and in a whole streamed answer
  each member reads its prompt once and then computes only the tokens it drafts and scores
  (every forward pass is counted);
- a two-member answer streams through ``SpecEMChatModel``;
- a forced tool call and a structured answer come out valid.

Each check returns what it measured and raises AssertionError when the path is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from langchain_core.tools import tool
from pydantic import BaseModel
from reference_scoring import QUESTION, separate_scores
from tiny_models import TOOLS_TEMPLATE, build_model

from specem_chain import Member, SpecEMChatModel
from specem_chain.backends import loaded_backend
from specem_chain.backends.transformers import TransformersBackend
from specem_chain.engine.types import Sampling, Segment

FLOAT32_TOLERANCE = 1e-4
"""What the CPU tests allow in float32."""
BF16_STEPS = 4
"""bfloat16 keeps 8 significant bits, so a logit between 16 and 32 is rounded to a multiple
of 1/8. Scores and logits computed two ways (one pass over several candidates, or one pass
each; from the cache, or afresh) are allowed to differ by this many such steps at the
largest logit in play: a wrong mask, position or cache entry moves them by whole nats."""
WINDOW = 6
ANSWER_TOKENS = 40


def tolerance(dtype: torch.dtype, logits: torch.Tensor) -> float:
    """How far two computations of the same score or logit may differ in ``dtype``."""
    if dtype == torch.float32:
        return FLOAT32_TOLERANCE
    largest = float(logits.abs().max())
    return BF16_STEPS * 2.0 ** (math.floor(math.log2(largest)) - 7)


def build(folder: Path) -> dict[str, Path]:
    """The tiny members the checks use, as the tests build them."""
    return {
        "llama": build_model(folder / "llama", "llama"),
        "qwen2": build_model(folder / "qwen2", "qwen2"),
        "tools-llama": build_model(folder / "tools-llama", "llama", chat_template=TOOLS_TEMPLATE),
        "tools-qwen2": build_model(folder / "tools-qwen2", "qwen2", chat_template=TOOLS_TEMPLATE),
    }


class TinyChecks:
    """The checks, on members from ``folders`` on ``device`` in ``dtype``."""

    def __init__(self, folders: dict[str, Path], device: str, dtype: str) -> None:
        self.members = {
            name: Member.local(str(path), device=device, dtype=dtype, backend="transformers")
            for name, path in folders.items()
        }

    def backend(self, name: str) -> TransformersBackend:
        found = loaded_backend(self.members[name])
        assert isinstance(found, TransformersBackend)
        return found

    def fresh_logits(self, backend: TransformersBackend, ids: list[int]) -> torch.Tensor:
        """The logits after ``ids``, read afresh with no cache."""
        with torch.inference_mode():
            tensor = torch.tensor([ids], device=backend.device)
            return backend.model(input_ids=tensor).logits[0, -1].float()

    async def inline_scores(self, architecture: str) -> dict[str, Any]:
        """In-line scores of five candidates (one of a single token, two that end the turn)
        against scoring each alone, with both scorings; the cache is cropped back after."""
        backend = self.backend(architecture)
        session = await backend.open(QUESTION)
        await session.accept(Segment(" Natalia sold"))
        prefix = session.cache.get_seq_length()
        candidates = [
            Segment(" 48 clips in April and half as many in May"),
            Segment(" clips"),
            Segment(" The quick brown fox"),
            Segment(" 72", finished=True),
            Segment("", finished=True),
        ]
        encoded = [seq for _, seq in (session._candidate(c) for c in candidates)]
        allowed = tolerance(backend.model.dtype, session.next_logits)
        found: dict[str, Any] = {"tolerance": allowed}
        for scoring in ("mean_logprob", "mean_logit"):
            inline = await session.score(candidates, scoring)
            assert [s.tokens for s in inline] == [len(e) for e in encoded]
            separate = separate_scores(backend, session.ids, encoded, scoring)
            differences = [abs(s.mean - e) for s, e in zip(inline, separate)]
            found[f"{scoring}_max_difference"] = max(differences)
            assert max(differences) <= allowed, (scoring, differences, allowed)
        assert session.cache.get_seq_length() == prefix, "the cache was not cropped back"
        await session.aclose()
        return found

    async def cache_equals_a_fresh_read(self) -> dict[str, Any]:
        """Three rounds of drafting, verifying and accepting, then the cached state against
        reading the whole context afresh."""
        backend = self.backend("qwen2")
        session = await backend.open(QUESTION)
        for seed in range(3):
            draft = await session.draft(WINDOW, Sampling(), seed)
            text = draft.text or " x"
            await session.score([Segment(text), Segment(" 5")], "mean_logprob")
            await session.accept(Segment(text))
        assert session.cache.get_seq_length() == len(session.ids)
        fresh = self.fresh_logits(backend, session.ids)
        difference = float((session.next_logits - fresh).abs().max())
        allowed = tolerance(backend.model.dtype, fresh)
        await session.aclose()
        assert difference <= allowed, (difference, allowed)
        return {
            "context_tokens": len(session.ids),
            "max_difference": difference,
            "tolerance": allowed,
        }

    async def accepting_a_verified_candidate_runs_no_pass(self) -> dict[str, Any]:
        backend = self.backend("llama")
        session = await backend.open(QUESTION)
        await session.score([Segment(" 48 clips"), Segment(" The quick brown fox")], "mean_logprob")

        def no_forward(*args: Any, **kwargs: Any) -> torch.Tensor:
            raise AssertionError("accepting a verified candidate ran the model")

        session._forward = no_forward  # type: ignore[method-assign]
        await session.accept(Segment(" The quick brown fox"))
        del session._forward
        fresh = self.fresh_logits(backend, session.ids)
        difference = float((session.next_logits - fresh).abs().max())
        allowed = tolerance(backend.model.dtype, fresh)
        await session.aclose()
        assert difference <= allowed, (difference, allowed)
        return {"max_difference": difference, "tolerance": allowed}

    async def streamed_answer(self) -> dict[str, Any]:
        """A two-member answer streamed through SpecEMChatModel, every forward pass of both
        members counted. Each member reads its prompt once (the only pass from position 0),
        and afterwards computes at most: a token per token it drafts; each candidate's
        tokens once to score them; and, a round, the accepted candidate's tokens and two
        more for each candidate whose first token merged with the context's last (read
        again from there). A design that reads the context again would compute its prompt
        at least once a round for every draft and every candidate."""
        names = ("llama", "qwen2")
        llm = SpecEMChatModel(
            members=[self.members[n] for n in names],
            max_tokens=ANSWER_TOKENS,
            window=WINDOW,
            seed=4,
        )
        with counted_passes({n: self.backend(n) for n in names}) as passes:
            chunks = [chunk async for chunk in llm.astream("How many clips?")]
        full = chunks[0]
        for chunk in chunks[1:]:
            full += chunk
        specem = full.response_metadata["specem"]
        rounds = specem["segments"]
        assert chunks[-1].chunk_position == "last"
        assert len(rounds) == len(chunks) and full.content
        assert full.content == "".join(r["text"] for r in rounds)
        assert {r["member"] for r in rounds} <= set(names)
        assert all(r["verifiers"] == list(names) for r in rounds)
        found: dict[str, Any] = {"rounds": len(rounds), "answer_characters": len(full.content)}
        for seat, name in enumerate(names):
            usage = specem["usage"][name]
            prompt, drafted = usage["input_tokens"], usage["output_tokens"]
            reads = passes[name]
            lengths = [r["verification"]["tokens"][seat] for r in rounds if "verification" in r]
            scored = sum(map(sum, lengths))
            bound = drafted + scored + sum(max(n) + 2 * len(n) for n in lengths)
            computed = sum(n for _, n in reads[1:])
            found[name] = {
                "prompt_tokens": reads[0][1],
                "passes": len(reads),
                "passes_from_position_0": sum(start == 0 for start, _ in reads),
                "computed_after_the_prompt": computed,
                "bound": bound,
                "a_rereading_design_at_least": prompt * sum(1 + len(n) for n in lengths),
            }
            assert reads[0] == (0, prompt), (reads[0], prompt)
            assert found[name]["passes_from_position_0"] == 1, "the context was read again"
            assert computed <= bound, (name, computed, bound)
        return found

    async def tool_call(self) -> dict[str, Any]:
        """A forced call, streamed. (The tool takes no arguments: random members dead-end
        under a schema with required arguments, where the format admits a start no value
        can finish; the CPU tests check calls with arguments on SmolLM2.)"""
        llm = self._tools_pair().bind_tools([clock], tool_choice="any")
        chunks = [chunk async for chunk in llm.astream("What time is it?")]
        message = chunks[0]
        for chunk in chunks[1:]:
            message += chunk
        assert message.invalid_tool_calls == [], message.invalid_tool_calls
        assert [(c["name"], c["args"]) for c in message.tool_calls] == [("clock", {})]
        assert message.response_metadata["finish_reason"] == "tool_calls"
        return {"chunks": len(chunks), "content": message.content}

    async def structured_output(self) -> dict[str, Any]:
        """A structured answer parsed into its Pydantic class, JSON schema and function
        calling both."""
        found = {}
        for method in ("json_schema", "function_calling"):
            llm = self._tools_pair().with_structured_output(Ping, method=method)
            result = await llm.ainvoke("Ping?")
            assert isinstance(result, Ping), result
            found[method] = "parsed"
        return found

    def _tools_pair(self) -> SpecEMChatModel:
        members = [self.members[n] for n in ("tools-llama", "tools-qwen2")]
        return SpecEMChatModel(members=members, max_tokens=ANSWER_TOKENS, window=WINDOW, seed=0)


@tool
def clock() -> str:
    """Tell the time."""
    return "noon"


class Ping(BaseModel):
    """An answer with no fields: an empty JSON object."""


@contextmanager
def counted_passes(
    backends: dict[str, TransformersBackend],
) -> Iterator[dict[str, list[tuple[int, int]]]]:
    """Every forward pass of each backend's model while the block runs, as (its first
    position, its tokens)."""
    passes: dict[str, list[tuple[int, int]]] = {name: [] for name in backends}
    handles = []
    for name, backend in backends.items():

        def count(module: Any, args: Any, kwargs: dict[str, Any], seen=passes[name]) -> None:
            positions = kwargs["position_ids"]
            seen.append((int(positions[0, 0]), int(kwargs["input_ids"].shape[1])))

        handles.append(backend.model.register_forward_pre_hook(count, with_kwargs=True))
    try:
        yield passes
    finally:
        for handle in handles:
            handle.remove()


def checks(tiny: TinyChecks) -> dict[str, Any]:
    """The checks by name, each a coroutine function."""
    return {
        "inline scores (llama)": lambda: tiny.inline_scores("llama"),
        "inline scores (qwen2)": lambda: tiny.inline_scores("qwen2"),
        "KV cache equals a fresh read": tiny.cache_equals_a_fresh_read,
        "accepting a verified candidate runs no pass": (
            tiny.accepting_a_verified_candidate_runs_no_pass
        ),
        "streamed two-member answer, forward passes counted": tiny.streamed_answer,
        "forced tool call": tiny.tool_call,
        "structured output": tiny.structured_output,
    }
