"""One request end to end: open a session per member, run the rounds, close the sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .backends.base import MemberSession
from .backends.chat import Message, Tool
from .engine import AnswerFormat, EngineConfig, RoundEvent, Seat, run_rounds
from .errors import EnsembleError
from .members import Member, Sampling

if TYPE_CHECKING:
    from .backends.llamacpp import LlamaCppBackend
    from .backends.openai_completions import OpenAICompletionsBackend
    from .backends.tgi import TGIBackend
    from .backends.transformers import TransformersBackend

    Backend = TransformersBackend | LlamaCppBackend | TGIBackend | OpenAICompletionsBackend


def load_backend(member: Member) -> TransformersBackend | LlamaCppBackend:
    """The shared, loaded backend of a local member (loaded once per process)."""
    if member.backend == "llamacpp":
        try:
            from .backends.llamacpp import LlamaCppBackend
        except ImportError as error:
            raise EnsembleError(
                f"member {member.label!r} runs on llama.cpp and needs the llamacpp extra: "
                "pip install 'specem-chain[llamacpp]'"
            ) from error
        return LlamaCppBackend.load(member)
    try:
        from .backends.transformers import TransformersBackend
    except ImportError as error:
        raise EnsembleError(
            f"member {member.label!r} runs in this process and needs the local extra: "
            "pip install 'specem-chain[local]'"
        ) from error
    return TransformersBackend.load(member)


_remote: dict[Member, TGIBackend | OpenAICompletionsBackend] = {}


def remote_backend(member: Member) -> TGIBackend | OpenAICompletionsBackend:
    """The shared backend of a remote member: one connection pool per server and settings."""
    key = member.model_copy(update={"sampling": Sampling(), "role": "both"})
    if key not in _remote:
        if member.kind == "tgi":
            from .backends.tgi import TGIBackend

            _remote[key] = TGIBackend(member)
        else:
            from .backends.openai_completions import OpenAICompletionsBackend

            _remote[key] = OpenAICompletionsBackend(member)
    return _remote[key]


async def open_session(
    member: Member, messages: Sequence[Message], tools: Sequence[Tool] = ()
) -> MemberSession:
    backend: Backend
    if member.remote:
        backend = remote_backend(member)
    else:
        backend = await asyncio.to_thread(load_backend, member)
    return await backend.open(messages, tools)


async def answer_rounds(
    members: Sequence[Member],
    messages: Sequence[Message],
    config: EngineConfig,
    tools: Sequence[Tool] = (),
    answer_format: AnswerFormat | None = None,
) -> AsyncIterator[tuple[RoundEvent, dict[str, int]]]:
    """Run one request; yield each round's event with the members' prompt token counts.

    ``tools`` go to every member's chat template; ``answer_format`` shapes the answer (see
    :func:`~specem_chain.engine.run_rounds`).
    """
    if not messages:
        raise EnsembleError("the conversation is empty: give at least one message")
    remote = [m.label for m in members if m.remote]
    if remote and config.scoring != "mean_logprob":
        raise EnsembleError(
            f"scoring={config.scoring!r} needs raw logits, which servers do not return; "
            f"members {remote} are remote: use scoring='mean_logprob'"
        )
    opened = await asyncio.gather(
        *(open_session(m, messages, tools) for m in members), return_exceptions=True
    )
    sessions = [s for s in opened if not isinstance(s, BaseException)]
    try:
        for result in opened:
            if isinstance(result, BaseException):
                raise result
        prompt_tokens = {m.label: s.prompt_tokens for m, s in zip(members, sessions)}
        seats = [Seat(m, s) for m, s in zip(members, sessions)]
        async for event in run_rounds(seats, config, answer_format):
            yield event, prompt_tokens
    finally:
        await asyncio.gather(*(s.aclose() for s in sessions))


@dataclass
class Answer:
    """Everything one request produced, gathered from its round events."""

    members: list[str]
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    rounds: list[RoundEvent] = field(default_factory=list)

    def add(self, event: RoundEvent) -> None:
        self.rounds.append(event)

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.rounds)

    @property
    def finish_reason(self) -> str | None:
        return self.rounds[-1].finish_reason if self.rounds else None

    @property
    def weights(self) -> dict[str, float]:
        if not self.rounds:
            return {m: 1.0 / len(self.members) for m in self.members}
        return self.rounds[-1].weights

    @property
    def wins(self) -> dict[str, int]:
        wins = dict.fromkeys(self.members, 0)
        for event in self.rounds:
            wins[event.winner] += 1
        return wins

    @property
    def dropped(self) -> dict[str, str]:
        """Members dropped during the request (they kept failing), with the reason."""
        return {m: why for event in self.rounds for m, why in event.dropped.items()}

    @property
    def drafted_tokens(self) -> dict[str, int]:
        drafted = dict.fromkeys(self.members, 0)
        for event in self.rounds:
            for member, tokens in event.drafted_tokens.items():
                drafted[member] += tokens
        return drafted

    def usage(self) -> dict[str, object]:
        """Prompt and drafted tokens, summed over members and per member."""
        drafted = self.drafted_tokens
        input_tokens = sum(self.prompt_tokens.values())
        output_tokens = sum(drafted.values())
        return {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "answer_tokens": self.rounds[-1].answer_tokens if self.rounds else 0,
            "per_member": {
                m: {"input_tokens": self.prompt_tokens.get(m, 0), "output_tokens": drafted[m]}
                for m in self.members
            },
        }

    def segments(self) -> list[dict[str, object]]:
        """Per-round provenance: the accepted text, its member, the candidates and scores."""
        return [segment_record(e) for e in self.rounds]

    def to_json(self) -> dict[str, object]:
        return {
            "text": self.text,
            "segments": self.segments(),
            "members": self.members,
            "wins": self.wins,
            "weights": self.weights,
            "usage": self.usage(),
            "finish_reason": self.finish_reason,
            "dropped": self.dropped,
        }


def segment_record(event: RoundEvent) -> dict[str, object]:
    """One round's provenance as plain data: text, member, candidates, scores, weights."""
    return {
        "text": event.segment,
        "member": event.winner,
        "candidates": [{"member": c.member, "text": c.text} for c in event.candidates],
        "verifiers": list(event.verifiers),
        "scores": [list(row) for row in event.scores],
        "weights": event.weights,
        "dropped": event.dropped,
    }
