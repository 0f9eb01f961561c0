"""Haystack chat messages and tools in the request's format: chat-template turns and OpenAI
function tools."""

from __future__ import annotations

from collections.abc import Sequence

from haystack.dataclasses import ChatMessage, ChatRole, TextContent
from haystack.tools import Tool, Toolset, _check_duplicate_tool_names, flatten_tools_or_toolsets
from specem_chain.engine.types import Message, tool_call

ToolsArg = list[Tool | Toolset] | Toolset | None


def openai_tools(tools: ToolsArg) -> list[dict]:
    """Haystack tools (and the tools of toolsets) as OpenAI function tools; a ValueError
    names a duplicated tool name."""
    flat = flatten_tools_or_toolsets(tools)
    _check_duplicate_tool_names(flat)
    return [{"type": "function", "function": dict(tool.tool_spec)} for tool in flat]


def _text(message: ChatMessage, index: int) -> str:
    """The message's text parts, joined; images and files get a clear error."""
    if message.images or message.files:
        raise ValueError(
            f"message {index} ({message.role.value}) has an image or a file; "
            "SpecEMChatGenerator accepts text content only"
        )
    return "".join(message.texts)


def to_turn(message: ChatMessage, index: int) -> Message:
    """One Haystack message as a chat-template turn."""
    if message.role is ChatRole.TOOL:
        result = message.tool_call_result
        if result is None or len(message.tool_call_results) > 1:
            raise ValueError(f"message {index} (tool) must hold exactly one tool call result")
        content = result.result
        if not isinstance(content, str):
            if not all(isinstance(part, TextContent) for part in content):
                raise ValueError(
                    f"message {index} (tool) has an image or a file in its result; "
                    "SpecEMChatGenerator accepts text content only"
                )
            content = "".join(part.text for part in content)
        return {
            "role": "tool",
            "content": content,
            "tool_call_id": result.origin.id or "",
            "name": result.origin.tool_name,
        }
    turn: Message = {"role": message.role.value, "content": _text(message, index)}
    if message.tool_calls:
        turn["tool_calls"] = [
            tool_call(call.id, call.tool_name, call.arguments) for call in message.tool_calls
        ]
    return turn


def turns_from_haystack(messages: Sequence[ChatMessage]) -> list[Message]:
    """Haystack messages as chat-template turns, one per message (the request merges
    consecutive text turns of one role)."""
    return [to_turn(message, index) for index, message in enumerate(messages)]
