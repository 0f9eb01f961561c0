"""What every backend shares about drafting and contexts: the token-drafting loop of the
in-process backends, one way to finish a draft's text, and the prompt-length check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ..engine.types import Draft
from ..errors import PromptTooLongError

L = TypeVar("L")
"""A backend's logits for one position."""

MAX_CHARACTER_TOKENS = 3
"""Extra tokens a draft may take past its window to finish a character whose bytes the
window cut apart (UTF-8 has at most 4 bytes)."""

RUN_ON_TOKENS = 8
"""Extra tokens a draft that runs on may take past its window to finish its last word."""


def draft_tokens(
    first: L,
    step: Callable[[list[int]], L],
    sample: Callable[[L, list[int]], int],
    *,
    end_of_turn: frozenset[int],
    decode: Callable[[list[int]], str],
    window: int,
    room: int,
    run_on: bool = False,
) -> tuple[list[int], bool, bool]:
    """Sample up to ``window`` tokens from ``first`` on (``step(tokens)`` gives the logits
    after the tokens so far); return them, whether the member ended its turn, and whether
    they end where a word ends.

    Past the window, drafting goes on only to complete a character whose bytes the window
    cut apart or, with ``run_on``, to the end of the current word (the token that would
    start the next one is sampled and left out), up to :data:`RUN_ON_TOKENS` more; never
    past ``room`` tokens (what the member's context has left).
    """
    tokens: list[int] = []
    extra = RUN_ON_TOKENS if run_on else MAX_CHARACTER_TOKENS
    logits, limit = first, min(window + extra, room)
    while len(tokens) < limit:
        token = sample(logits, tokens)
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
