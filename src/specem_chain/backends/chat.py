"""Conversation messages as members render them, with the tools a request may call."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict

from typing_extensions import NotRequired

from ..tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN


class Function(TypedDict):
    name: str
    arguments: dict[str, Any]


class ToolCall(TypedDict):
    """A tool call in an assistant turn, as chat templates take it."""

    id: str
    type: Literal["function"]
    function: Function


class Message(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: NotRequired[list[ToolCall]]
    """An assistant turn's tool calls."""
    tool_call_id: NotRequired[str]
    """A tool turn's answer to this call."""
    name: NotRequired[str]
    """A tool turn's tool."""


Tool = dict[str, Any]
"""A tool in the OpenAI format: ``{"type": "function", "function": {"name", "description",
"parameters"}}`` (what ``convert_to_openai_tool`` makes)."""

TemplateRender = Callable[[Sequence[Message], Sequence[Tool] | None], str]
"""A chat template applied to turns and tools (None: no tools), ready for the answer."""

PLAIN_STOP = ("\nUser:",)
"""Where a member rendered with :func:`plain_transcript` ends its turn."""


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
