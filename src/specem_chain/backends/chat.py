"""Conversation messages as members render them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict


class Message(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


PLAIN_STOP = ("\nUser:",)
"""Where a member rendered with :func:`plain_transcript` ends its turn."""


def plain_transcript(messages: Sequence[Message]) -> str:
    """The conversation for a model without a chat template (a base model).

    ``System: ...``, ``User: ...`` and ``Assistant: ...`` turns separated by blank lines,
    ending with ``Assistant:`` for the answer. The member stops when it starts a new
    ``User:`` turn.
    """
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join([*turns, "Assistant:"])
