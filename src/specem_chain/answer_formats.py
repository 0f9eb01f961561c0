"""The answer formats a request can ask for: a tool call (``tool_choice``) or a JSON object
(``response_format``), each as an :class:`~specem_chain.engine.AnswerFormat` (the text the
answer starts with and a constraint on every candidate) for the engine."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .engine.constraints import (
    AnswerFormat,
    EitherAnswer,
    JsonObjectAnswer,
    ToolCallAnswer,
    schema_types,
)
from .engine.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from .engine.types import Message, Tool

FREE_TEXT_CHOICES = (None, False, "auto", "none")
ANY_TOOL_CHOICES = (True, "any", "required")


def tool_names(tools: Sequence[Tool]) -> tuple[str, ...]:
    return tuple(t["function"]["name"] for t in tools)


def forced_tools(tool_choice: Any, tools: Sequence[Tool]) -> list[Tool]:
    """The tools an answer must call under ``tool_choice``; none when it may be prose.

    ``"auto"`` (or None, False) lets the members choose, ``"none"`` hides the tools, ``"any"``
    (or ``"required"``, True) forces a call to one of them, and a tool name (or OpenAI's
    ``{"type": "function", "function": {"name": ...}}``) forces a call to that tool.
    """
    names = tool_names(tools)
    if tool_choice in FREE_TEXT_CHOICES:
        return []
    if not names:
        raise ValueError(f"tool_choice={tool_choice!r} forces a tool call, but no tools are bound")
    if tool_choice in ANY_TOOL_CHOICES:
        return list(tools)
    name = tool_choice
    if isinstance(tool_choice, dict):
        name = tool_choice.get("function", {}).get("name") or tool_choice.get("name")
    if name not in names:
        raise ValueError(
            f"tool_choice={tool_choice!r} is not 'auto', 'none', 'any', 'required' or the "
            f"name of a bound tool; the bound tools are {list(names)}"
        )
    return [t for t in tools if t["function"]["name"] == name]


def tool_parameters(tools: Sequence[Tool]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}


def tool_call_format(tools: Sequence[Tool], single: bool = False) -> AnswerFormat:
    """An answer of calls of ``tools`` only (one at most if ``single``).

    The answer starts inside the first call (with the tool's name when there is only one),
    so the members write the arguments, and the constraint keeps every accepted segment a
    prefix of valid calls whose arguments fit their tool's schema.
    """
    parameters = tool_parameters(tools)
    prefix = TOOL_CALL_OPEN + '\n{"name": "'
    if len(parameters) == 1:
        prefix += f'{next(iter(parameters))}", "arguments": {{'
    return AnswerFormat(prefix, ToolCallAnswer(parameters, single))


def json_schema_of(response_format: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema an OpenAI-style ``response_format`` asks for; None for JSON mode."""
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        return None
    if kind == "json_schema" and isinstance(response_format.get("json_schema"), dict):
        schema = response_format["json_schema"].get("schema")
        if isinstance(schema, dict):
            return schema
    raise ValueError(
        f"response_format={response_format!r} is not {{'type': 'json_object'}} or "
        "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}"
    )


def json_format(schema: dict[str, Any] | None) -> AnswerFormat:
    """An answer that is one JSON object, fitting ``schema`` when given. With a schema that
    names keys the answer starts at its first key, as its description tells the members."""
    keys = list((schema or {}).get("properties") or ())
    prefix = "{" + (f"{json.dumps(keys[0], ensure_ascii=False)}:" if keys else "")
    return AnswerFormat(prefix, JsonObjectAnswer(schema))


def json_instruction(schema: dict[str, Any] | None) -> str:
    """What the members are told to answer in JSON mode or with a JSON schema: the schema's
    keys in words (small models echo a raw JSON schema rather than follow it)."""
    properties = (schema or {}).get("properties")
    if not properties:
        return "Answer with a JSON object only." + (
            f" It follows this JSON schema: {json.dumps(schema)}" if schema else ""
        )
    required = set(schema.get("required", ()))
    lines = ["Answer with a JSON object only, with these keys, in this order:"]
    for name, spec in properties.items():
        kinds = "/".join(sorted(schema_types(spec) or ())) or "any JSON value"
        need = "required" if name in required else "optional"
        about = f": {spec['description']}" if spec.get("description") else ""
        lines.append(f'- "{name}" ({kinds}, {need}){about}')
    return "\n".join(lines)


def with_instruction(messages: Sequence[Message], instruction: str) -> list[Message]:
    """The conversation with ``instruction`` added to its system turn."""
    if messages and messages[0]["role"] == "system":
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{instruction}"}, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


@dataclass(frozen=True)
class RequestFormat:
    """What one request's tool and format options ask of its answer."""

    tools: list[Tool] = field(default_factory=list)
    """Given to every member's chat template; their calls are parsed from the answer."""
    answer: AnswerFormat | None = None
    """The prefix and candidate constraint the engine applies."""
    instruction: str | None = None
    """Added to the conversation's system turn."""
    stop: tuple[str, ...] = ()
    """Stop sequences the format adds."""


def checked_tools(tools: Sequence[Any]) -> list[Tool]:
    """Tools in the OpenAI format (``{"type": "function", "function": {"name", ...}}``); a
    ValueError names one that is not."""
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(function, dict)
            or tool.get("type") != "function"
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise ValueError(
                f"tool {index} is not an OpenAI function tool "
                '{"type": "function", "function": {"name": ..., "parameters": {...}}}: '
                f"{tool!r}"
            )
    return list(tools)


def request_format(
    tools: Sequence[Any] | None,
    tool_choice: Any,
    response_format: dict[str, Any] | None,
    parallel_tool_calls: bool | None = None,
) -> RequestFormat:
    """The format of a request's answer from its ``tools`` (OpenAI function tools),
    ``tool_choice``, ``response_format`` and ``parallel_tool_calls`` (False: one call at
    most); bad options get a ValueError that names them.

    With tools the members may call and a ``response_format``, the answer is either calls
    of the tools or the JSON object, whichever it starts as.
    """
    converted = checked_tools(tools or ())
    forced = forced_tools(tool_choice, converted)
    single = parallel_tool_calls is False
    if tool_choice == "none":
        converted = []
    if response_format is None:
        if forced:
            return RequestFormat(converted, tool_call_format(forced, single))
        # one call at most: the answer ends where the first call closes
        stop = (TOOL_CALL_CLOSE,) if single and converted else ()
        return RequestFormat(converted, None, stop=stop)
    if forced:
        raise ValueError(
            f"response_format and tool_choice={tool_choice!r} both fix the answer's format; "
            "give one of them"
        )
    schema = json_schema_of(response_format)
    answer = json_format(schema)
    if converted:
        calls = ToolCallAnswer(tool_parameters(converted), single)
        answer = AnswerFormat(constraint=EitherAnswer((calls, JsonObjectAnswer(schema))))
    return RequestFormat(converted, answer, json_instruction(schema))


@dataclass(frozen=True)
class AnswerOptions:
    """What shapes one answer besides the request's settings, the same for every front end:
    stop sequences, tools (OpenAI function tools) and the answer's format. Checked when
    made: a bad tool, choice or format raises a ValueError that names it.

    ``tool_choice``: ``"auto"`` (or None) lets the members answer or call, ``"none"`` hides
    the tools, ``"any"`` / ``"required"`` / True forces a call, and a tool's name (or
    OpenAI's ``{"type": "function", "function": {"name": ...}}``) forces that tool.
    ``response_format``: OpenAI's ``json_object`` or ``json_schema`` (``{"type": "text"}``
    is the free answer). ``parallel_tool_calls=False`` ends the answer after its first
    call. ``strict`` is accepted as OpenAI's API has it and changes nothing: the candidate
    constraint keeps every call and JSON answer to its schema.
    """

    stop: Sequence[str] | str | None = ()
    tools: Sequence[Tool] | None = ()
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    strict: bool | None = None
    format: RequestFormat = field(init=False, repr=False, compare=False)
    """What the options ask of the answer."""

    def __post_init__(self) -> None:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or ())
        response_format = self.response_format
        if isinstance(response_format, dict) and response_format.get("type") == "text":
            response_format = None
        asked = request_format(
            self.tools, self.tool_choice, response_format, self.parallel_tool_calls
        )
        object.__setattr__(self, "stop", tuple(stop))
        object.__setattr__(self, "tools", tuple(self.tools or ()))
        object.__setattr__(self, "response_format", response_format)
        object.__setattr__(self, "format", asked)


ANSWER_OPTIONS = tuple(f.name for f in fields(AnswerOptions) if f.init)
"""The answer options a call may give, by name."""
