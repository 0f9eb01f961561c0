"""Stop sequences: where the answer must end, and what may be shown before that is known."""

from __future__ import annotations

from collections.abc import Sequence


def find_stop(text: str, stops: Sequence[str], start: int = 0) -> int | None:
    """Index of the earliest stop sequence in ``text`` that ends after ``start``, if any.

    ``start`` lets a caller search only where new text can complete a stop sequence.
    """
    hits = [i for stop in stops if (i := text.find(stop, max(0, start - len(stop) + 1))) != -1]
    return min(hits, default=None)


def unsafe_tail(text: str, stops: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that could still grow into a stop sequence.

    That much text must be held back while streaming: showing it could show the start of a
    stop sequence that the answer will end before.
    """
    longest = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:n]):
                longest = n
                break
    return longest
