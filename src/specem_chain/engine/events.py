"""What one round produced, as the engine reports it to the layers above."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .policy import Verification
from .types import Segment

FinishReason = Literal["end_of_turn", "length", "stop_sequence"]


@dataclass(frozen=True)
class Candidate:
    """One member's draft after boundary cleaning."""

    member: str
    text: str
    finished: bool
    tokens: int
    """Tokens the member drafted this round (its cost), before cleaning."""
    source: Literal["draft", "format"] = "draft"
    """"format": no draft fitted the answer's required format, so the format offers its
    own text: the closing text when the answer can be completed, else each way on it knows
    (the rest of every tool name that fits); credited to the first drafter."""

    @property
    def segment(self) -> Segment:
        return Segment(self.text, self.finished)


@dataclass(frozen=True)
class RoundTiming:
    """A round's wall time by step (the members of a step run side by side), and each
    member's own time in it."""

    draft_s: float
    verify_s: float
    accept_s: float
    drafting: dict[str, float] = field(default_factory=dict)
    """Each drafter's drafting time this round, over every drafting attempt."""
    scoring: dict[str, float] = field(default_factory=dict)
    """Each verifier's time to score the round's candidates (empty when not verified)."""


@dataclass(frozen=True)
class RoundEvent:
    """What happened in one round."""

    round: int
    segment: str
    """The accepted segment (before any stop-sequence cut)."""
    text: str
    """Answer text released to the reader this round; the concatenation over rounds is the
    answer. It lags ``segment`` only while a stop sequence might be starting."""
    winner: str
    candidates: tuple[Candidate, ...]
    verifiers: tuple[str, ...]
    scores: tuple[tuple[float, ...], ...]
    """The normalised score matrix: a row per verifier, a column per candidate."""
    weights: dict[str, float]
    """Every member's weight after this round's update."""
    finish_reason: FinishReason | None
    timing: RoundTiming
    verified: bool = True
    """False when no verification was needed (one candidate, or a fast finish)."""
    answer_tokens: int = 0
    """Accepted answer length so far, counted in each winner's tokenizer."""
    drafted_tokens: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    """Members dropped in this round, with the reason; they take no further part."""
    verification: Verification | None = None
    """What the verifiers said, as the policy saw it (None when not verified)."""
    rewards: dict[str, float | None] = field(default_factory=dict)
    """Each member's reward this round (None: no evidence); empty when not verified."""
    resting: tuple[str, ...] = ()
    """Drafters that did not draft this round: their starting weight was below the gate,
    or their weight fell below the exit threshold in an earlier round."""
    loop_redraft: bool = False
    """True when the round's first candidates would have made the answer go round a loop,
    so it was drafted again under the drafters' loop penalties."""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
