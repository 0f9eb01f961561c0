"""Chat templates for members whose server takes plain text (OpenAI-style completions).

A member's conversation is rendered by, in order of preference: the chat template of its
tokenizer (a local folder or .gguf, loaded with transformers from the local extra), an
explicit Jinja template (rendered here, no torch needed), or the plain transcript.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Template
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import EnsembleError, MemberSpecError
from ..members import Member
from .chat import (
    PLAIN_STOP,
    PROBE_CONVERSATION,
    Message,
    Tool,
    end_of_turn_text,
    plain_transcript,
    render_chat,
    renders_tools,
)

Render = Callable[[Sequence[Message], bool, Sequence[Tool] | None], str]
"""Renders a conversation and its tools; the flag asks for the assistant's generation
prompt."""


@dataclass(frozen=True)
class ChatTemplate:
    """How one member's conversation becomes prompt text, and how its turn ends."""

    render_raw: Render
    end_of_turn: str
    """Text that ends the member's turn; a finished candidate is scored with it appended."""
    stop: tuple[str, ...]
    """Stop sequences of a draft."""
    bos_text: str = ""
    """Left off the front of the prompt: the server's tokenizer adds this BOS token itself."""
    bos: str = ""
    """The model's BOS token, added by its tokenizer or not ("" when unknown)."""
    native_tools: bool = False
    """The template writes the tools it is given."""

    def render(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> str:
        """The conversation, ready for the answer (:func:`render_chat`)."""
        text = render_chat(
            lambda turns, tools: self.render_raw(turns, True, tools),
            messages,
            tools,
            native_tools=self.native_tools,
        )
        return text.removeprefix(self.bos_text) if self.bos_text else text


PLAIN = ChatTemplate(lambda messages, _, __: plain_transcript(messages), "\n\nUser:", PLAIN_STOP)
"""For a model without a chat template: its turn ends where a new user turn starts."""


def member_template(member: Member) -> ChatTemplate:
    if member.tokenizer:
        return tokenizer_template(member.tokenizer)
    if member.chat_template:
        return jinja_template(member.chat_template)
    return PLAIN


def _with_end(render: Render, bos_text: str = "", bos: str = "") -> ChatTemplate:
    end = end_of_turn_text(render(PROBE_CONVERSATION, False, None))
    native = renders_tools(lambda turns, tools: render(turns, True, tools))
    return ChatTemplate(render, end, (end,) if end else (), bos_text, bos, native)


def compile_template(source: str) -> Template:
    """A Jinja chat template, compiled as transformers compiles one (sandboxed, with its
    ``raise_exception`` and ``strftime_now`` helpers and the loop controls)."""

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def jinja_template(template: str) -> ChatTemplate:
    """An explicit Jinja chat template, rendered as transformers renders one."""
    compiled = compile_template(template)

    def render(
        messages: Sequence[Message], generation_prompt: bool, tools: Sequence[Tool] | None
    ) -> str:
        return compiled.render(
            messages=list(messages),
            tools=tools,
            add_generation_prompt=generation_prompt,
            bos_token="",
            eos_token="",
        )

    return _with_end(render)


def tokenizer_template(source: str) -> ChatTemplate:
    """The chat template of a local tokenizer: a model folder or a .gguf file."""
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise EnsembleError(
            f"reading the tokenizer {source!r} needs the local extra (pip install "
            "'specem-chain[local]'); or give the member a chat_template instead"
        ) from error
    path = Path(source).expanduser()
    kwargs: dict[str, Any] = {}
    if path.suffix == ".gguf":
        path, kwargs = path.parent, {"gguf_file": path.name}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), **kwargs)
    except OSError as error:
        raise MemberSpecError(f"cannot load the tokenizer {source!r}: {error}") from error
    bos = tokenizer.bos_token or ""
    if not tokenizer.chat_template:
        return replace(PLAIN, bos=bos)

    def render(
        messages: Sequence[Message], generation_prompt: bool, tools: Sequence[Tool] | None
    ) -> str:
        return tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=tools,
            add_generation_prompt=generation_prompt,
            tokenize=False,
        )

    adds_bos = bool(bos) and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]
    return _with_end(render, bos if adds_bos else "", bos)
