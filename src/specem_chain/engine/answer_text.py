"""The answer as it grows: its text, its length in tokens, where it must stop, and how much
of it may be shown yet."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .stops import find_stop, unsafe_tail
from .types import Segment

LOOP_SPAN = 24
"""Characters a segment must have, all of them already in the answer, to repeat it (a
shorter one may be a word or a name the answer rightly uses again)."""
LOOP_ROUNDS = 3
"""Rounds in a row whose segments repeat the answer that make a loop: a worked answer
restates a line now and then (on the development sets' recorded rounds every candidate of a
round repeated the answer in 121 of 200 GSM8K answers that did not loop), a loop does it
round after round."""


@dataclass
class AnswerText:
    """One request's answer so far.

    Streaming holds back the end of the text that could still grow into a stop sequence:
    :meth:`release` gives only what is safe to show.
    """

    stop: tuple[str, ...]
    max_tokens: int
    text: str = ""
    """The answer so far (it starts with the answer format's prefix, if any)."""
    tokens: int = 0
    """Accepted tokens, counted in each round winner's tokenizer."""
    released: int = 0
    """Characters of :attr:`text` shown so far."""
    repeating: int = 0
    """Segments appended in a row, the latest included, that repeated the answer."""

    def repeats(self, segment: str) -> bool:
        """True when ``segment``, without its outer whitespace, is :data:`LOOP_SPAN`
        characters or more that the answer already holds."""
        text = segment.strip()
        return len(text) >= LOOP_SPAN and text in self.text

    def goes_round(self, candidates: Sequence[Segment]) -> bool:
        """True when taking any of the round's candidates would make a loop: every one
        repeats the answer and none ends it, after :data:`LOOP_ROUNDS` - 1 segments in a row
        that repeated it."""
        return self.repeating >= LOOP_ROUNDS - 1 and all(
            not c.finished and self.repeats(c.text) for c in candidates
        )

    def window(self, window: int) -> int:
        """The draft length for the next round: ``window``, or what the limit leaves."""
        return min(window, self.max_tokens - self.tokens)

    def append(self, segment: str) -> bool:
        """Add the round's segment; True (and the text cut before it) if a stop sequence
        now appears."""
        start = len(self.text)
        self.repeating = self.repeating + 1 if self.repeats(segment) else 0
        self.text += segment
        stop_at = find_stop(self.text, self.stop, start)
        if stop_at is None:
            return False
        self.text = self.text[:stop_at]
        return True

    def count(self, tokens: int) -> bool:
        """Count the round's accepted tokens (at least one: every round moves the answer
        on, so the loop ends); True once the length limit is reached."""
        self.tokens += max(tokens, 1)
        return self.tokens >= self.max_tokens

    def release(self, final: bool) -> str:
        """The text not shown yet that is safe to show now (all of it when ``final``)."""
        end = len(self.text) if final else len(self.text) - unsafe_tail(self.text, self.stop)
        text, self.released = self.text[self.released : end], end
        return text
