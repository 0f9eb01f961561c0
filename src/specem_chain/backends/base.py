"""What the engine needs from a member, whatever carries it (in-process model or server)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ..members import Sampling

Scoring = Literal["mean_logprob", "mean_logit"]
"""Per-token score a verifier averages over a candidate: log-probability or raw logit."""


@dataclass(frozen=True)
class Draft:
    """A member's sampled continuation of at most ``window`` tokens."""

    text: str
    tokens: int
    finished: bool
    """True when the member ended its turn (end-of-turn token or its own stop text)."""


MAX_CHARACTER_TOKENS = 3
"""Extra tokens a draft may take past its window to finish a character whose bytes the
window cut apart (UTF-8 has at most 4 bytes)."""


def finish_draft(text: str, tokens: int, finished: bool, stop_texts: Sequence[str]) -> Draft:
    """A draft from its decoded text: cut before the member's own stop texts (which end its
    turn), and without a trailing partial character if the window stopped it."""
    for stop in stop_texts:
        if (cut := text.find(stop)) != -1:
            text, finished = text[:cut], True
    if not finished:
        text = text.rstrip("\ufffd")
    return Draft(text=text, tokens=tokens + finished, finished=finished)


@dataclass(frozen=True)
class Segment:
    """Text to score or accept. A finished segment also ends the turn."""

    text: str
    finished: bool = False


class MemberSession(Protocol):
    """One member's state for one request: its rendered conversation and token context.

    A session is created per request and never shared, so concurrent requests are safe.
    """

    @property
    def prompt_tokens(self) -> int:
        """Tokens of the rendered conversation, in this member's tokenizer."""
        ...

    async def draft(self, window: int, sampling: Sampling, seed: int) -> Draft:
        """Sample a continuation of the current context, at most ``window`` tokens."""
        ...

    async def score(self, candidates: Sequence[Segment], scoring: Scoring) -> list[float]:
        """Mean per-token score of each candidate as a continuation of the context.

        With ``mean_logprob`` the per-token score is the log-probability; with
        ``mean_logit`` it is the raw logit of the token. A finished candidate is scored
        together with this member's own end-of-turn token, so an empty finished candidate
        ("stop here") gets the probability of stopping.
        """
        ...

    async def accept(self, segment: Segment) -> int:
        """Append the winning segment to the context; return its length in tokens."""
        ...

    async def aclose(self) -> None:
        """Release what the session holds (KV cache, connections)."""
        ...
