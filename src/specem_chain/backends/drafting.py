"""What every backend shares about drafting and contexts: the token-drafting loop of the
in-process backends, one way to finish a draft's text, and the prompt-length check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from ..engine.types import Draft, Fits
from ..errors import PromptTooLongError

L = TypeVar("L")
"""A backend's logits for one position."""

MAX_CHARACTER_TOKENS = 3
"""Extra tokens a draft may take past its window to finish a character whose bytes the
window cut apart (UTF-8 has at most 4 bytes)."""

RUN_ON_TOKENS = 8
"""Extra tokens a draft that runs on may take past its window to finish its last word."""

FITTING_AMONG = 64
"""When a sampled token breaks the answer's format, the draft's token is sampled again among
those of this many likeliest that keep it fitting (or, when none does, the likeliest that
does among :data:`FITTING_MOST`)."""

ANY_CHARACTER = "\u00e9"
"""A character outside ASCII, standing for one whose bytes a draft has not all written."""

FITTING_MOST = 4096
"""The likeliest tokens searched for one that keeps a draft fitting; when none does, the
draft ends there, and the engine's shaping takes over."""


class Sampler(Protocol[L]):
    """How an in-process backend samples a draft's tokens (seeded, with its penalties); the
    backends' samplers subclass it for :meth:`__call__`."""

    def __call__(self, logits: L) -> int:
        """A token sampled and counted as drafted."""
        token = self.pick(logits)
        self.take(token)
        return token

    def pick(self, logits: L, among: Sequence[int] | None = None) -> int:
        """A token sampled from ``logits`` (only among ``among`` when given)."""
        ...

    def take(self, token: int) -> None:
        """Count ``token`` as drafted (the repetition penalty reads it from now on)."""
        ...

    def likeliest(self, logits: L, most: int) -> list[int]:
        """The ``most`` likeliest tokens under ``logits``, likeliest first."""
        ...


def draft_tokens(
    first: L,
    step: Callable[[list[int]], L],
    sampler: Sampler[L],
    *,
    end_of_turn: frozenset[int],
    decode: Callable[[list[int]], str],
    window: int,
    room: int,
    run_on: bool = False,
    fits: Fits | None = None,
) -> tuple[list[int], bool, bool]:
    """Sample up to ``window`` tokens from ``first`` on (``step(tokens)`` gives the logits
    after the tokens so far); return them, whether the member ended its turn, and whether
    they end where a word ends.

    Past the window, drafting goes on only to complete a character whose bytes the window
    cut apart or, with ``run_on``, to the end of the current word (the token that would
    start the next one is sampled and left out), up to :data:`RUN_ON_TOKENS` more; never
    past ``room`` tokens (what the member's context has left). With ``fits``, a token that
    would break the answer's format is sampled again among those that keep it fitting
    (:func:`fitting_token`); a draft with none left ends there.
    """
    tokens: list[int] = []
    extra = RUN_ON_TOKENS if run_on else MAX_CHARACTER_TOKENS
    logits, limit = first, min(window + extra, room)
    while len(tokens) < limit:
        token = sampler.pick(logits)
        if fits is not None:
            token = fitting_token(token, logits, sampler, tokens, fits, end_of_turn, decode)
            if token is None:
                return tokens, False, False
        sampler.take(token)
        if token in end_of_turn:
            return tokens, True, False
        if run_on and len(tokens) >= window and _starts_word(decode, tokens, token):
            return tokens, False, True
        tokens.append(token)
        text = decode(tokens) if len(tokens) >= window else ""
        if run_on and text.endswith("\n"):
            return tokens, False, True
        if len(tokens) >= limit or (text and not run_on and not text.endswith("\ufffd")):
            break
        logits = step(tokens)
    return tokens, False, False


def fitting_token(
    token: int,
    logits: L,
    sampler: Sampler[L],
    tokens: list[int],
    fits: Fits,
    end_of_turn: frozenset[int],
    decode: Callable[[list[int]], str],
) -> int | None:
    """``token`` if the draft still fits after it; else a token sampled again among the
    :data:`FITTING_AMONG` likeliest that fit, else the likeliest that fits among
    :data:`FITTING_MOST`, else None. A token that leaves a character's bytes incomplete
    fits where a character outside ASCII may come; the next must complete it."""

    def fitting(candidate: int) -> bool:
        if candidate in end_of_turn:
            return fits(decode(tokens), True)
        text = decode([*tokens, candidate])
        if "\ufffd" in text[:-1]:  # bytes that make no character
            return False
        return fits(text[:-1] + ANY_CHARACTER if text.endswith("\ufffd") else text, False)

    if fitting(token):
        return token
    ranked = sampler.likeliest(logits, FITTING_MOST)
    among = [t for t in ranked[:FITTING_AMONG] if t != token and fitting(t)]
    if among:
        return sampler.pick(logits, among)
    return next((t for t in ranked[FITTING_AMONG:] if fitting(t)), None)


def _starts_word(decode: Callable[[list[int]], str], tokens: list[int], token: int) -> bool:
    """Whether ``token`` after ``tokens`` starts with white space (a new word)."""
    before = decode(tokens)
    return not before.endswith("\ufffd") and decode([*tokens, token])[len(before) :][:1].isspace()


def decode_after(detokenize: Callable[[list[int]], str], anchor: int, tokens: list[int]) -> str:
    """The text of ``tokens`` as it reads after the token ``anchor`` (a leading space that
    a tokenizer only shows mid-text is kept)."""
    head = detokenize([anchor])
    return detokenize([anchor, *tokens])[len(head) :]


def finish_draft(text: str, tokens: int, finished: bool, stop_texts: Sequence[str]) -> Draft:
    """A draft from its decoded text: cut before the member's own stop texts (which end its
    turn), and without a trailing partial character if the window stopped it."""
    for stop in stop_texts:
        if stop and (cut := text.find(stop)) != -1:
            text, finished = text[:cut], True
    if not finished:
        text = text.rstrip("\ufffd")
    return Draft(text=text, tokens=tokens, finished=finished)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)


def check_prompt(member: str, tokens: int, most: int, holder: str) -> None:
    """Fail with a clear error when the prompt is longer than ``most`` tokens; ``holder``
    says what limits it (``"whose context holds 8192"``)."""
    if tokens > most:
        raise PromptTooLongError(
            f"the prompt is {tokens} tokens for member {member!r}, {holder}; "
            "shorten the conversation"
        )
