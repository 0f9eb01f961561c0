"""One request end to end: open a session per member, run the rounds, close the sessions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .backends.base import MemberSession
from .backends.chat import Message
from .engine import EngineConfig, RoundEvent, Seat, run_rounds
from .errors import EnsembleError
from .members import Member

if TYPE_CHECKING:
    from .backends.transformers import TransformersBackend


def load_backend(member: Member) -> TransformersBackend:
    """The shared, loaded backend of a member (loaded once per process)."""
    try:
        from .backends.transformers import TransformersBackend
    except ImportError as error:
        raise EnsembleError(
            f"member {member.label!r} runs in this process and needs the local extra: "
            "pip install 'specem-chain[local]'"
        ) from error
    return TransformersBackend.load(member)


async def open_session(member: Member, messages: Sequence[Message]) -> MemberSession:
    backend = await asyncio.to_thread(load_backend, member)
    return await backend.open(messages)


async def answer_rounds(
    members: Sequence[Member], messages: Sequence[Message], config: EngineConfig
) -> AsyncIterator[tuple[RoundEvent, dict[str, int]]]:
    """Run one request; yield each round's event with the members' prompt token counts."""
    if not messages:
        raise EnsembleError("the conversation is empty: give at least one message")
    opened = await asyncio.gather(
        *(open_session(m, messages) for m in members), return_exceptions=True
    )
    sessions = [s for s in opened if not isinstance(s, BaseException)]
    try:
        for result in opened:
            if isinstance(result, BaseException):
                raise result
        prompt_tokens = {m.label: s.prompt_tokens for m, s in zip(members, sessions)}
        seats = [Seat(m, s) for m, s in zip(members, sessions)]
        async for event in run_rounds(seats, config):
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
    }
