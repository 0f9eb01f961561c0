"""How a member's conversation becomes prompt text, and how its turn ends: one
:class:`ChatTemplate` for every kind of member.

A member's conversation is rendered by its own chat template: the tokenizer's (transformers),
the GGUF's (llama.cpp), a local tokenizer's or an explicit Jinja template (OpenAI-style
servers, which take plain text), or, for a model without one (a base model), the plain
transcript of :func:`plain_transcript`. Jinja templates are compiled as transformers compiles
them (:func:`compile_template`), so a member renders the same prompt on every backend. A TGI
server renders with its own template; its backend uses the same helpers around it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..engine.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from ..engine.types import Message, Tool
from ..errors import EnsembleError, MemberSpecError
from ..members import Member

TemplateRender = Callable[[Sequence[Message], Sequence[Tool] | None], str]
"""A chat template applied to turns and tools (None: no tools), ready for the answer."""

PLAIN_STOP = ("\nUser:",)
"""Where a member rendered with :func:`plain_transcript` ends its turn."""
PLAIN_END = "\n\nUser:"
"""What follows a finished answer in the plain transcript."""


def plain_transcript(messages: Sequence[Message]) -> str:
    """The conversation for a model without a chat template (a base model).

    ``System: ...``, ``User: ...`` and ``Assistant: ...`` turns separated by blank lines,
    ending with ``Assistant:`` for the answer. The member stops when it starts a new
    ``User:`` turn. Tools and tool turns arrive here already written as text.
    """
    turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join([*turns, "Assistant:"])


def render_chat(
    render: TemplateRender,
    messages: Sequence[Message],
    tools: Sequence[Tool] = (),
    *,
    native_tools: bool,
) -> str:
    """The conversation in a member's chat template, ready for the answer.

    A template with tool support (``native_tools``) gets the tools and the tool turns as they
    are. Any other template gets them as text (:func:`tools_as_text`). A template that
    rejects a system turn gets the system text folded into the first user turn.
    """
    if native_tools:
        return render_folding_system(lambda turns: render(turns, tools or None), messages)
    return render_folding_system(lambda turns: render(turns, None), tools_as_text(messages, tools))


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


# -- tools for templates without tool support ---------------------------------------------

TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
"""The system text that introduces the tools: Qwen2.5's own words, so every member is asked
for the same tool-call format."""


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """A tool call written as a ``<tool_call>`` block."""
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{call}\n{TOOL_CALL_CLOSE}"


def tools_as_text(messages: Sequence[Message], tools: Sequence[Tool] = ()) -> list[Message]:
    """The conversation with tools written as text, for a template without tool support.

    The tool signatures join the system turn (:data:`TOOLS_PROMPT`), an assistant turn's
    tool calls become ``<tool_call>`` blocks after its text, and tool results become a user
    turn of ``<tool_response>`` blocks, as Qwen2.5's template writes them.
    """
    turns: list[Message] = []
    if tools:
        signatures = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        prompt = TOOLS_PROMPT.format(tools=signatures)
        if messages and messages[0]["role"] == "system":
            prompt = f"{messages[0]['content']}\n\n{prompt}"
            messages = messages[1:]
        turns.append({"role": "system", "content": prompt})
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        calls = [
            tool_call_text(c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls", [])
        ]
        content = "\n".join(part for part in (content, *calls) if part)
        if turns and turns[-1]["role"] == role != "system":
            turns[-1]["content"] += "\n" + content
        else:
            turns.append({"role": role, "content": content})
    return turns


PROBE_TOOL: Tool = {
    "type": "function",
    "function": {
        "name": "specem_probe_tool",
        "description": "Probe.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def renders_tools(render: TemplateRender) -> bool:
    """Whether a chat template writes the tools it is given (Qwen2.5's does; SmolLM2's
    ignores them)."""
    try:
        return "specem_probe_tool" in render(PROBE_CONVERSATION[:1], [PROBE_TOOL])
    except Exception:  # a template that fails on tools has no tool support
        return False


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


# -- Jinja chat templates -------------------------------------------------------------------


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}`` marks the assistant's text in templates
    made for training; rendering a prompt keeps the text as it is, as transformers does."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_keep"), [], [], body).set_lineno(lineno)

    def _keep(self, caller: Callable[[], str]) -> str:
        return caller()


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: Jinja's own sorts keys and escapes ``<>&'`` for HTML."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


UPSTREAM_DEFECTS = (
    # Qwen2.5-Coder 1.5B Instruct's template (in the built-in's GGUF, from its publisher)
    # shows its tool-call example in doubled braces inside a Jinja string, so the prompt
    # reads {{"name": ...}}; the model copies it and writes its call without the tags.
    (
        '<tool_call>\\n{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}\\n',
        '<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n',
    ),
)
"""Known defects of published chat templates, as (template text, its correction): every
backend renders a template with them corrected, so a member reads the same prompt on each."""


def corrected(source: str) -> str:
    """``source`` with the :data:`UPSTREAM_DEFECTS` it has corrected."""
    for defect, correction in UPSTREAM_DEFECTS:
        source = source.replace(defect, correction)
    return source


def compile_template(source: str) -> jinja2.Template:
    """A Jinja chat template, compiled as transformers compiles one: sandboxed, with
    ``trim_blocks`` and ``lstrip_blocks``, its ``tojson``, ``raise_exception`` and
    ``strftime_now``, loop controls and ``{% generation %}`` blocks."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


Render = Callable[[Sequence[Message], bool, Sequence[Tool] | None], str]
"""Renders turns and tools (None: no tools); the flag asks for the assistant's generation
prompt."""


@dataclass(frozen=True)
class ChatTemplate:
    """How one member's conversation becomes prompt text, and how its turn ends."""

    render_turns: Render | None
    """The template itself; None for the plain transcript of a model without one."""
    end_of_turn: str
    """Text of the marker that ends the member's turn (``"<|im_end|>"``); "" if unknown."""
    native_tools: bool = False
    """The template writes the tools it is given (else they go in as text)."""
    bos: str = ""
    """The model's BOS token ("" when unknown)."""
    bos_text: str = ""
    """Left off the front of the prompt because the tokenizer adds it itself."""

    @classmethod
    def from_source(cls, source: str | None, **special_tokens: str) -> ChatTemplate:
        """A Jinja template (:func:`compile_template`), rendered with the model's special
        tokens (``bos_token``, ``eos_token``); None: the plain transcript."""
        if not source:
            return cls(None, "", bos=special_tokens.get("bos_token", ""))
        compiled = compile_template(corrected(source))

        def render(
            messages: Sequence[Message], generation_prompt: bool, tools: Sequence[Tool] | None
        ) -> str:
            return compiled.render(
                messages=[dict(m) for m in messages],
                tools=tools,
                add_generation_prompt=generation_prompt,
                **special_tokens,
            )

        return cls.probed(render, bos=special_tokens.get("bos_token", ""))

    @classmethod
    def probed(cls, render: Render, *, bos: str = "", bos_text: str = "") -> ChatTemplate:
        """The template ``render``, with its end-of-turn marker and tool support found by
        rendering probe conversations."""
        end = end_of_turn_text(render(PROBE_CONVERSATION, False, None))
        native = renders_tools(lambda turns, tools: render(turns, True, tools))
        return cls(render, end, native, bos, bos_text)

    @property
    def plain(self) -> bool:
        return self.render_turns is None

    @property
    def stop(self) -> tuple[str, ...]:
        """Text that ends the member's turn when it appears in a draft."""
        if self.render_turns is None:
            return PLAIN_STOP
        return (self.end_of_turn,) if self.end_of_turn else ()

    @property
    def ending(self) -> str:
        """Text a finished candidate is scored with: what follows the member's last word."""
        return PLAIN_END if self.render_turns is None else self.end_of_turn

    def render(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> str:
        """The conversation, ready for the answer (:func:`render_chat`)."""
        if self.render_turns is None:
            return plain_transcript(tools_as_text(messages, tools))
        turns = self.render_turns
        text = render_chat(
            lambda m, t: turns(m, True, t), messages, tools, native_tools=self.native_tools
        )
        return text.removeprefix(self.bos_text) if self.bos_text else text


def tokenizer_template(tokenizer: Any) -> ChatTemplate:
    """The chat template of a transformers tokenizer, rendered by transformers itself."""
    bos = tokenizer.bos_token or ""
    if not tokenizer.chat_template:
        return ChatTemplate(None, "", bos=bos)
    source = tokenizer.chat_template
    template = corrected(source) if isinstance(source, str) else None  # None: its own choice

    def render(
        messages: Sequence[Message], generation_prompt: bool, tools: Sequence[Tool] | None
    ) -> str:
        return tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=tools,
            add_generation_prompt=generation_prompt,
            tokenize=False,
            chat_template=template,
        )

    return ChatTemplate.probed(render, bos=bos)


def member_template(member: Member) -> ChatTemplate:
    """The template of a member whose server takes plain text: its ``tokenizer=`` (a model
    folder or .gguf, loaded with transformers), its ``chat_template=``, or the plain
    transcript. The BOS token is left off the front when the tokenizer adds it itself."""
    if member.chat_template:
        return ChatTemplate.from_source(member.chat_template, bos_token="", eos_token="")
    if not member.tokenizer:
        return ChatTemplate(None, "")
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise EnsembleError(
            f"reading the tokenizer {member.tokenizer!r} needs the local extra (pip install "
            "'specem-chain[local]'); or give the member a chat_template instead"
        ) from error
    path = Path(member.tokenizer).expanduser()
    kwargs: dict[str, Any] = {}
    if path.suffix == ".gguf":
        path, kwargs = path.parent, {"gguf_file": path.name}
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), **kwargs)
    except OSError as error:
        raise MemberSpecError(f"cannot load the tokenizer {member.tokenizer!r}: {error}") from error
    template = tokenizer_template(tokenizer)
    adds_bos = bool(template.bos) and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]
    return replace(template, bos_text=template.bos) if adds_bos and not template.plain else template
