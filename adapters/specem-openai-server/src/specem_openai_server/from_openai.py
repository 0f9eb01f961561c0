"""An OpenAI chat-completions request as a specem request: its conversation, settings and
answer options."""

from __future__ import annotations

import json
from typing import Any

from specem_chain import RequestSettings
from specem_chain.engine.types import Message, ToolCall

from .errors import bad_request
from .schema import ChatCompletionRequest, ChatMessage

ROLES: dict[str, Any] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def to_messages(messages: list[ChatMessage]) -> list[Message]:
    """The conversation as chat-template turns (specem merges consecutive turns of a role)."""
    return [to_message(message, index) for index, message in enumerate(messages)]


def to_message(message: ChatMessage, index: int) -> Message:
    turn: Message = {"role": ROLES[message.role], "content": text_of(message, index)}
    if message.role == "assistant" and message.tool_calls:
        turn["tool_calls"] = [
            tool_call(call.id, call.function.name, call.function.arguments, index)
            for call in message.tool_calls
        ]
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


def tool_call(call_id: str, name: str, arguments: str, index: int) -> ToolCall:
    """An earlier answer's call, its JSON-text arguments read into an object."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = None
    if not isinstance(args, dict):
        raise bad_request(
            f"messages.{index}.tool_calls: the arguments of {call_id!r} are not a JSON object",
            f"messages.{index}.tool_calls",
        )
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def request_settings(request: ChatCompletionRequest, defaults: RequestSettings) -> RequestSettings:
    """The server's settings with the request's length, temperature, repetition and loop
    penalties and seed."""
    given = {
        "max_tokens": request.max_completion_tokens or request.max_tokens,
        "temperature": request.temperature,
        "repeat_penalty": request.repeat_penalty,
        "loop_penalty": request.loop_penalty,
        "seed": request.seed,
    }
    chosen = {name: value for name, value in given.items() if value is not None}
    return RequestSettings.model_validate({**defaults.model_dump(), **chosen})


def request_options(request: ChatCompletionRequest) -> dict[str, Any]:
    """``open_request``'s answer options: stop sequences, tools and the answer's format
    (OpenAI's ``{"type": "text"}`` is the free answer, no format)."""
    stop = [request.stop] if isinstance(request.stop, str) else request.stop or []
    response_format = request.response_format
    if response_format is not None and response_format.get("type") == "text":
        response_format = None
    return {
        "stop": stop,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "response_format": response_format,
        "parallel_tool_calls": request.parallel_tool_calls,
    }
