"""Conversation messages as members render them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def render_folding_system(
    render: Callable[[Sequence[Message]], str], messages: Sequence[Message]
) -> str:
    """``render(messages)``; a template that rejects a system turn gets the system text
    folded into the first user turn instead."""
    try:
        return render(messages)
    except Exception:  # jinja raises on a role the template does not accept
        if not messages or messages[0]["role"] != "system":
            raise
        return render(fold_system(messages))


def fold_system(messages: Sequence[Message]) -> list[Message]:
    """Fold a leading system message into the first user message, for templates that
    reject a system turn."""
    system, rest = messages[0]["content"], list(messages[1:])
    if rest and rest[0]["role"] == "user":
        return [{"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}, *rest[1:]]
    return [{"role": "user", "content": system}, *rest]


END_PROBE = "\u2063specem-end-probe\u2063"
"""An assistant turn's text, rendered to find what the chat template puts after a turn."""


def end_of_turn_text(templated: str) -> str:
    """The end-of-turn marker in a conversation rendered as [user, assistant=END_PROBE]:
    the text after the probe, up to the first whitespace (``"<|im_end|>"``)."""
    _, _, after = templated.partition(END_PROBE)
    return after.strip().split(maxsplit=1)[0] if after.strip() else ""


PROBE_CONVERSATION: list[Message] = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": END_PROBE},
]
