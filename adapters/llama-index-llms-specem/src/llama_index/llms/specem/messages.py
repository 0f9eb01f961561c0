"""LlamaIndex's messages, tools and tool calls as specem-chain's, and back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.llms.llm import ToolSelection

from specem_chain.engine.tool_calls import ParsedCall
from specem_chain.engine.types import Message, Tool, ToolCall, tool_call

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
"""LlamaIndex's message roles that a chat template knows, as its roles."""


def to_tool(tool: BaseTool) -> Tool:
    """A LlamaIndex tool as an OpenAI function tool, the form every member's template gets."""
    return tool.metadata.to_openai_tool(skip_length_check=True)


def tool_block(call: ParsedCall) -> ToolCallBlock:
    """A valid call of the answer as a LlamaIndex tool-call block, with the request's id."""
    return ToolCallBlock(tool_call_id=call.id, tool_name=call.name, tool_kwargs=call.args)


def tool_selections(message: ChatMessage) -> list[ToolSelection]:
    """The tool calls of an assistant message (its tool-call blocks), as LlamaIndex selects
    tools."""
    return [
        ToolSelection(
            tool_id=block.tool_call_id or block.tool_name,
            tool_name=block.tool_name,
            tool_kwargs=_arguments(block.tool_kwargs),
        )
        for block in message.blocks
        if isinstance(block, ToolCallBlock)
    ]


def _arguments(arguments: Any) -> Any:
    """A call's arguments as an object when they are JSON text (OpenAI's form)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _calls(message: ChatMessage) -> list[ToolCall]:
    """An assistant message's calls in the form a chat template reads: from its tool-call
    blocks, else from ``additional_kwargs["tool_calls"]`` (OpenAI dicts)."""
    calls = [
        tool_call(b.tool_call_id, b.tool_name, b.tool_kwargs)
        for b in message.blocks
        if isinstance(b, ToolCallBlock)
    ]
    if not calls:
        for call in message.additional_kwargs.get("tool_calls") or ():
            call = call.model_dump() if hasattr(call, "model_dump") else call
            function = call["function"]
            calls.append(tool_call(call.get("id"), function["name"], function["arguments"]))
    return calls


def to_message(message: ChatMessage, index: int) -> Message:
    """A LlamaIndex message as a chat-template turn."""
    role = ROLES.get(message.role.value)
    if role is None:
        raise ValueError(
            f"message {index} has the role {message.role.value!r}; SpecEM accepts "
            f"{', '.join(ROLES)} messages"
        )
    texts = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif not isinstance(block, (ThinkingBlock, ToolCallBlock)) or (
            isinstance(block, ToolCallBlock) and role != "assistant"
        ):
            raise ValueError(
                f"message {index} ({role}) has a {block.block_type!r} block; SpecEM accepts "
                "text (and an assistant's tool calls) only"
            )
    turn: Message = {"role": role, "content": "\n".join(texts)}
    if role == "assistant" and (calls := _calls(message)):
        turn["tool_calls"] = calls
    if role == "tool":
        turn["tool_call_id"] = message.additional_kwargs.get("tool_call_id") or ""
        if name := message.additional_kwargs.get("name"):
            turn["name"] = name
    return turn


def turns_from_llama_index(messages: Sequence[ChatMessage]) -> list[Message]:
    """LlamaIndex messages as chat-template turns, one per message (the request merges
    consecutive text turns of one role)."""
    return [to_message(message, index) for index, message in enumerate(messages)]
