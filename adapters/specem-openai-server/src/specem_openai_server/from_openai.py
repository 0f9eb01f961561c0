"""An OpenAI chat-completions request as a specem request: its conversation, and its
settings and answer options as call arguments."""

from __future__ import annotations

from typing import Any

from specem_chain.engine.types import Message, tool_call

from .errors import bad_request
from .schema import ChatCompletionRequest, ChatMessage

ROLES: dict[str, Any] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def turns_from_openai(messages: list[ChatMessage]) -> list[Message]:
    """The conversation as chat-template turns (specem merges consecutive turns of a role)."""
    return [to_message(message, index) for index, message in enumerate(messages)]


def to_message(message: ChatMessage, index: int) -> Message:
    turn: Message = {"role": ROLES[message.role], "content": text_of(message, index)}
    if message.role == "assistant" and message.tool_calls:
        try:
            turn["tool_calls"] = [
                tool_call(call.id, call.function.name, call.function.arguments)
                for call in message.tool_calls
            ]
        except ValueError as error:
            where = f"messages.{index}.tool_calls"
            raise bad_request(f"{where}: {error}", where) from None
    if message.role == "tool":
        if not message.tool_call_id:
            raise bad_request(
                f"messages.{index}: a tool message needs the tool_call_id of the call it answers",
                f"messages.{index}.tool_call_id",
            )
        turn["tool_call_id"] = message.tool_call_id
        if message.name:
            turn["name"] = message.name
    return turn


def text_of(message: ChatMessage, index: int) -> str:
    """The message's text: its content, or its text parts joined; any other part is a 400."""
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    for part in message.content:
        if part.type != "text":
            raise bad_request(
                f"messages.{index} has a {part.type!r} content part; the server accepts "
                "text content only",
                f"messages.{index}.content",
            )
    return "".join(part.text or "" for part in message.content)


def call_arguments(request: ChatCompletionRequest) -> dict[str, Any]:
    """The request's settings (length, temperature, repetition and loop penalties, seed)
    and answer options (stop sequences, tools, the answer's format), as a call gives them
    to :func:`specem_chain.request.merge_call`."""
    given = {
        "max_tokens": request.asked_tokens,
        "temperature": request.temperature,
        "repeat_penalty": request.repeat_penalty,
        "loop_penalty": request.loop_penalty,
        "seed": request.seed,
        "stop": request.stop,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
        "parallel_tool_calls": request.parallel_tool_calls,
    }
    return {name: value for name, value in given.items() if value is not None}
