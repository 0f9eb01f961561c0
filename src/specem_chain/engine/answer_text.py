"""The answer as it grows: its text, its length in tokens, where it must stop, and how much
of it may be shown yet."""

from __future__ import annotations

from dataclasses import dataclass

from .stops import find_stop, unsafe_tail


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

    def window(self, window: int) -> int:
        """The draft length for the next round: ``window``, or what the limit leaves."""
        return min(window, self.max_tokens - self.tokens)

    def append(self, segment: str) -> bool:
        """Add the round's segment; True (and the text cut before it) if a stop sequence
        now appears."""
        start = len(self.text)
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
